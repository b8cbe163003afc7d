"""A job's tasks: every workload named, and the warning when the budget cannot cover them."""

from __future__ import annotations

from pathlib import Path

from database import Storage, TuneFarmDatabase
from database.queries import list_workloads
from tests.conftest import DATA
from tuner.job.tasks import TRIALS_TO_COVER_A_TASK, job_tasks, thin_budget_warning
from tuner.model import load_model

MLP = Path(__file__).parents[2] / "examples" / "mlp.py"


def test_a_static_models_workloads_are_named_by_their_tasks(sqlite_url, llvm_target) -> None:
    """`db list` / `db best` / `--task gelu` find a static model's kernels by name."""
    storage = Storage(sqlite_url)
    db = TuneFarmDatabase(storage, llvm_target)
    found = job_tasks(load_model(MLP).mod, llvm_target, db)
    rows = list_workloads(storage)
    assert len(rows) == len(found.tasks) >= 2
    assert sorted(r["task"] for r in rows) == sorted(t.name for t in found.tasks)
    gelu = [t.name for t in found.tasks if "gelu" in t.name]
    assert gelu and [r["task"] for r in list_workloads(storage, task="gelu")] == gelu


def test_bucket_tasks_are_named_by_their_kernel_and_keep_their_buckets(
    sqlite_url, llvm_target
) -> None:
    storage = Storage(sqlite_url)
    db = TuneFarmDatabase(storage, llvm_target)
    found = job_tasks(load_model(DATA / "dyn_kernels.py").mod, llvm_target, db, {"n": [4, 16]})
    assert found.buckets == {"n": [4, 16]}
    rows = list_workloads(storage)
    assert rows and all(r["task"] and "[" not in r["task"] for r in rows)
    assert {r["bucket"]["n"] for r in rows if r["bucket"]} == {4, 16}


def test_a_budget_too_small_for_the_tasks_warns_and_names_the_buckets(
    sqlite_url, llvm_target
) -> None:
    """`--trials 4` across many bucket tasks: most stay untuned, and the user is told so."""
    db = TuneFarmDatabase(Storage(sqlite_url), llvm_target)
    found = job_tasks(
        load_model(DATA / "dyn_kernels.py").mod, llvm_target, db, {"n": [1, 4, 16, 64]}
    )
    n = len(found.tasks)
    warning = thin_budget_warning(found, 4)
    assert warning is not None
    assert f"cannot cover {n} task(s)" in warning and "n = 1, 4, 16, 64" in warning
    assert f"--trials {TRIALS_TO_COVER_A_TASK * n}" in warning
    assert thin_budget_warning(found, TRIALS_TO_COVER_A_TASK * n) is None
    assert thin_budget_warning(found, 0) is None  # nothing new to measure: nothing to warn


def test_a_static_model_with_a_thin_budget_warns_without_buckets(sqlite_url, llvm_target) -> None:
    db = TuneFarmDatabase(Storage(sqlite_url), llvm_target)
    found = job_tasks(load_model(MLP).mod, llvm_target, db)
    warning = thin_budget_warning(found, 1)
    assert warning is not None and "bucket" not in warning and "--shape" not in warning


def test_db_list_shows_the_latest_jobs_convergence_per_kernel(sqlite_url, llvm_target) -> None:
    """Each workload shows how the latest job that stored it ended; one no job stored, '—'."""
    import json

    from typer.testing import CliRunner

    from database.jobs import record_job_tasks, start_job
    from tuner.cli import app

    storage = Storage(sqlite_url)
    found = job_tasks(load_model(MLP).mod, llvm_target, TuneFarmDatabase(storage, llvm_target))
    ids = sorted(r["id"] for r in list_workloads(storage))
    first, second = ids[0], ids[1]

    def task(wid: int, converged: bool, gain: float) -> dict:
        return {
            "workload_id": wid, "name": f"w{wid}", "weight": 1, "trials": 8,
            "best_sec": 1e-4, "baseline_sec": 2e-4, "expected_gain": gain,
            "converged": converged, "converged_at": 8 if converged else None,
        }  # fmt: skip

    old = start_job(storage, name="old", target_json="{}", budget=8)
    record_job_tasks(storage, old, [task(first, False, 0.3)])
    new = start_job(storage, name="new", target_json="{}", budget=8)
    record_job_tasks(storage, new, [task(first, True, 0.015)])
    rows = {r["id"]: r for r in list_workloads(storage)}
    assert (rows[first]["converged"], rows[first]["expected_gain"]) == (True, 0.015)
    assert rows[first]["converged_job_id"] == new
    others = [r for wid, r in rows.items() if wid != first]
    assert len(others) == len(found.tasks) - 1 >= 1
    assert all(r["converged"] is None and r["expected_gain"] is None for r in others)
    assert list_workloads(storage, task=rows[first]["task"])[0]["converged_job_id"] == new
    assert list_workloads(storage, task=rows[second]["task"])[0]["converged"] is None

    shown = CliRunner().invoke(app, ["db", "list", "--db", sqlite_url])
    assert shown.exit_code == 0, shown.output
    assert "converged" in shown.output and "yes (+2% expected)" in shown.output
    assert "—" in shown.output  # the workloads no job stored
    listed = json.loads(
        CliRunner().invoke(app, ["db", "list", "--json", "--db", sqlite_url]).output
    )
    assert {w["id"]: w["converged"] for w in listed}[first] is True
