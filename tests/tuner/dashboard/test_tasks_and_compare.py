"""The dashboard's pages over what jobs store when they finish (``job_tasks``: converged,
expected gain, weights), two databases compared, and the live workers of a real Ray cluster."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from database import Storage
from database.jobs import record_job_tasks, start_job, update_job
from database.models import EMPTY_TRACE, RecordRow, WorkloadRow
from tests.cli_assert import one_line_error
from tests.conftest import pg_database
from tests.ray_processes import RayProcesses
from tests.tuner.dashboard.server import XSS, free_port, get, serve
from tuner.cli import app

runner = CliRunner()


def add_kernel(
    storage: Storage, job_id: int, shash: str, n: int, default: float, best: float
) -> int:
    """Kernel ``shash`` at bucket n (its workload, made once) with two records in job
    ``job_id``: its untuned default (``default`` s) and one searched schedule (``best`` s)."""

    def add(session: Any) -> int:
        bucket = json.dumps({"n": n})
        w = session.query(WorkloadRow).filter_by(shash=shash, bucket_json=bucket).first()
        if w is None:
            w = WorkloadRow(
                shash=shash,
                mod_json="{}",
                tvm_version="0",
                task_name=f"k_{shash}",
                bucket_json=bucket,
            )
            session.add(w)
            session.flush()
        for candidate, trace, sec in ((shash, EMPTY_TRACE, default), ("c" + shash, "[[1]]", best)):
            session.add(
                RecordRow(
                    workload_id=w.id,
                    candidate_hash=candidate,
                    trace_json=trace,
                    args_info_json="[]",
                    mean_sec=sec,
                    target_key="t",
                    target_json="{}",
                    target_kind="llvm",
                    job_id=job_id,
                )
            )
        return w.id

    return storage.run(add)


def task(wid: int, weight: int, converged: bool, gain: float | None) -> dict[str, Any]:
    """A ``job_tasks`` row as a finished job stores it."""
    return {
        "workload_id": wid,
        "name": f"w{wid}",
        "weight": weight,
        "trials": 8,
        "best_sec": None,
        "baseline_sec": None,
        "expected_gain": gain,
        "converged": converged,
        "converged_at": 6 if converged else None,
    }


def sha(url: str) -> str:
    return hashlib.sha256(Path(url.removeprefix("sqlite:///")).read_bytes()).hexdigest()


@pytest.fixture
def model_db(tmp_path: Path) -> str:
    """Model ``m`` tuned by two finished jobs: job 1 before ``job_tasks`` existed (no rows),
    job 2 storing how its tasks ended. Kernel a is tuned (4 ms → 1 ms) and called 3 times a
    run, kernel b untuned (its search never beat 1 ms) and called once."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    storage = Storage(url)
    old = start_job(storage, name="old", model="m", target_json="{}", budget=4)
    add_kernel(storage, old, "aa", 4, 4e-3, 1e-3)
    update_job(storage, old, status="done", trials_done=4)
    new = start_job(storage, name="new", model="m", target_json="{}", budget=4)
    wa = add_kernel(storage, new, "aa", 16, 4e-3, 1e-3)
    wb = add_kernel(storage, new, "bb", 16, 1e-3, 2e-3)
    record_job_tasks(storage, new, [task(wa, 3, True, 0.004), task(wb, 1, False, 0.25)])
    update_job(storage, new, status="done", trials_done=4)
    storage.dispose()
    return url


def test_the_job_page_shows_converged_and_expected_gain_or_a_dash(model_db: str) -> None:
    before = sha(model_db)
    with serve(model_db) as base:
        kernels = json.loads(get(base + "/api/jobs/2")[1])["kernels"]
        by = {k["kernel"]: k for k in kernels}
        assert by["k_aa"]["converged"] is True and by["k_aa"]["converged_at"] == 6
        assert by["k_aa"]["weight"] == 3 and by["k_aa"]["expected_gain"] == pytest.approx(0.004)
        assert by["k_bb"]["converged"] is False and by["k_bb"]["expected_gain"] == 0.25
        status, page, _ = get(base + "/jobs/2")
        assert status == 200 and "yes, at 6" in page and "0.4%" in page and "25.0%" in page
        # a job that finished before job_tasks existed: a dash, no error
        (old,) = json.loads(get(base + "/api/jobs/1")[1])["kernels"]
        assert old["converged"] is None and old["expected_gain"] is None
        status, page, _ = get(base + "/jobs/1")
        assert status == 200 and '<td class="conv">—</td>' in page
        assert "finished before schema revision 0008" in page
    assert sha(model_db) == before


def test_coverage_is_the_share_of_kernel_calls_else_of_cells(model_db: str) -> None:
    with serve(model_db) as base:
        cov = json.loads(get(base + "/api/models/m")[1])
        # cells: a@n=4 (tuned, no weight: job 1 stored none), a@n=16 (tuned, 3 calls),
        # b@n=16 (untuned, 1 call); a weight is missing, so the share is of cells: 2 of 3
        assert cov["share_of"] == "cells" and cov["cells_weighted"] == 2
        assert cov["tuned_share"] == pytest.approx(2 / 3)
        page = get(base + "/models/m")[1]
        assert 'data-share-of="cells"' in page and "1 cell has no known weight" in page
    # job 1's kernel gets its weight from a later job that tuned it (same workload) too
    storage = Storage(model_db)
    job = start_job(storage, name="again", model="m", target_json="{}", budget=2)
    wid = add_kernel(storage, job, "aa", 4, 4e-3, 1e-3)
    record_job_tasks(storage, job, [task(wid, 3, False, None)])
    update_job(storage, job, status="done", trials_done=2)
    storage.dispose()
    with serve(model_db) as base:
        cov = json.loads(get(base + "/api/models/m")[1])
        # calls per run: a@4 3 (tuned), a@16 3 (tuned), b@16 1 (untuned): 6 of 7 calls tuned
        assert cov["share_of"] == "calls" and cov["tuned_share"] == pytest.approx(6 / 7)
        page = get(base + "/models/m")[1]
        assert 'data-share-of="calls"' in page and "86%" in page and "kernel calls" in page


@pytest.fixture
def other_db(tmp_path: Path) -> str:
    """A second database: a filler workload first (its ids differ from ``model_db``'s), then
    kernels aa and bb at n=16, faster than model_db's, and cc that model_db has not."""
    url = f"sqlite:///{tmp_path / 'other.db'}"
    storage = Storage(url)
    job = start_job(storage, name=XSS, model="m", target_json="{}", budget=6)
    add_kernel(storage, job, "zz", 16, 1e-3, 1e-3)
    add_kernel(storage, job, "bb", 16, 1e-3, 0.5e-3)
    add_kernel(storage, job, "aa", 16, 4e-3, 0.25e-3)
    add_kernel(storage, job, "aa", 4, 4e-3, 2e-3)  # same kernel, bucket of job 1, not job 2
    update_job(storage, job, status="done", trials_done=6)
    storage.dispose()
    return url


def test_two_databases_compared_by_structural_hash_and_bucket(model_db: str, other_db: str) -> None:
    before = sha(model_db), sha(other_db)
    with serve(model_db, compare=other_db) as base:
        form = get(base + "/compare-db")[1]
        assert "#2 new" in form and "&lt;img src=x onerror=alert(1)&gt;" in form
        assert XSS not in form
        assert "/compare-db" in get(base + "/compare")[1]  # the one-database form links it
        # from a job's page: that job preselected as A, in either form
        assert 'href="/compare-db?a=2"' in get(base + "/jobs/2")[1]
        assert '<option value="2" selected>' in get(base + "/compare-db?a=2")[1]
        form = get(base + "/compare?a=1")[1]
        assert form.count('<option value="1" selected>') == 1  # A
        assert form.count('<option value="2" selected>') == 1  # B: another job
        status, body, _ = get(base + "/api/compare-db?a=2&b=1")
        assert status == 200
        data = json.loads(body)
        ratios = {(k["kernel"], k["bucket"]): k["ratio"] for k in data["kernels"]}
        assert ratios == {
            ("k_aa", "n=16"): pytest.approx(0.25),
            ("k_bb", "n=16"): pytest.approx(0.5),  # a job's best counts its default too
        }
        assert data["other_where"] == other_db and data["b"]["name"] == XSS
        assert data["curves"]["a"]["trials"] and data["curves"]["b"]["trials"]
        status, page, _ = get(base + "/compare-db?a=2&b=1")
        assert status == 200 and XSS not in page and "0.25x" in page and "0.50x" in page
        assert get(base + "/compare-db?a=2&b=9")[0] == 404
        assert get(base + "/api/compare-db?a=9&b=1")[0] == 404
    with serve(model_db) as base:  # without a second database: say how to give one
        assert "--compare-db URL" in get(base + "/compare-db")[1]
        assert "error" in json.loads(get(base + "/api/compare-db")[1])
    assert (sha(model_db), sha(other_db)) == before


def test_a_bad_second_database_is_one_line_naming_it(model_db: str, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    import sqlite3

    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    cases = {str(tmp_path / "none.db"): "does not exist", str(foreign): "not a TuneFarm database"}
    for path, needle in cases.items():
        args = ["dashboard", "--db", model_db, "--compare-db", f"sqlite:///{path}"]
        result = runner.invoke(app, [*args, "--port", str(free_port())])
        one_line_error(result, needle)
        assert "--compare-db" in result.output


@pytest.mark.postgres
def test_a_second_postgres_database_is_read_only_and_its_password_never_shown(
    model_db: str,
) -> None:
    from sqlalchemy.engine import make_url

    with pg_database() as url:
        storage = Storage(url)
        job = start_job(storage, name="pg", model="m", target_json="{}", budget=2)
        add_kernel(storage, job, "aa", 16, 4e-3, 2e-3)
        update_job(storage, job, status="done", trials_done=2)
        storage.dispose()
        secret = make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
        with serve(model_db, compare=secret) as base:
            for path in ("/compare-db", "/compare-db?a=2&b=1", "/api/compare-db?a=2&b=1"):
                status, body, _ = get(base + path)
                assert status == 200 and "s3cret-pw" not in body, path
            data = json.loads(get(base + "/api/compare-db?a=2&b=1")[1])
            assert [k["ratio"] for k in data["kernels"]] == [pytest.approx(2.0)]


def test_an_unreachable_cluster_is_one_line_on_the_devices_page(model_db: str) -> None:
    with serve(model_db, address=f"http://127.0.0.1:{free_port()}") as base:
        data = json.loads(get(base + "/api/devices")[1])
        assert data["workers"] is None and "cannot reach the Ray cluster" in data["workers_error"]
        assert "cannot reach the Ray cluster" in get(base + "/devices")[1]


@pytest.mark.ray
@pytest.mark.slow
def test_the_devices_page_lists_a_live_clusters_workers(
    model_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RayProcesses(worker_resources=[]) as cluster:
        monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
        with serve(model_db, address=cluster.dashboard) as base:
            (node,) = json.loads(get(base + "/api/devices")[1])["workers"]
            assert node["head"] and node["state"] == "ALIVE" and node["cpus"] == 1
            page = get(base + "/devices")[1]
            assert 'id="workers"' in page and f"{node['node_id'][:12]} (head)" in page
