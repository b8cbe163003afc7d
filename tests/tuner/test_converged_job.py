"""tune --until-converged: each task stops once its expected gain is below --gain, the job
ends when every task has (stopped_by "converged"), and --json reports per task ``converged``
and ``expected_gain``; the CLI's bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from database import Storage
from database.jobs import stored_task_ends
from tests.cli_assert import one_line_error
from tests.conftest import TINY
from tuner.cli import app
from tuner.search.convergence import ConvergenceConfig

ROOT = Path(__file__).resolve().parents[2]

# two matmuls of different shapes: two tasks (a tiny_matmul.py with a second layer)
TWO_MATMULS = """
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor((32, 64), "float32"),
        w: R.Tensor((64, 32), "float32"),
        v: R.Tensor((32, 16), "float32"),
    ) -> R.Tensor((32, 16), "float32"):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.matmul(y, v)
            R.output(z)
        return z
"""

PER_ROUND = 4


def tune_json(tmp_path: Path, name: str, *options: str) -> dict[str, Any]:
    model = tmp_path / "two_matmuls.py"
    model.write_text(TWO_MATMULS)
    cmd = [
        sys.executable, "-m", "tuner.cli", "tune", str(model), "--json",
        "--db", f"sqlite:///{tmp_path / name}.db", "--per-iter", str(PER_ROUND),
        "--min-repeat-ms", "2", "--seed", "3", "--search", "thread", *options,
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.ray
def test_converged_tasks_stop_and_the_job_ends_before_its_trials(tmp_path: Path) -> None:
    """With a gain a flattening curve is soon under (0.999: only a task whose best fell 1000x
    since half its trials, or whose best is timed that noisily, expects more), each task is
    converged once it has the fewest trials that may converge it
    (ConvergenceConfig.min_trials) and gets no round after that: the job stops far short of
    its trials. Without --until-converged, the same job
    spends its trials and reports its tasks' estimates, none converged."""
    least = ConvergenceConfig().min_trials
    out = tune_json(
        tmp_path, "converged", "--trials", "400", "--until-converged", "--gain", "0.999"
    )
    assert out["stopped_by"] == "converged"
    tasks = out["tasks"]
    assert len(tasks) == 2
    for task in tasks:
        assert task["converged"] is True
        assert 0.0 <= task["expected_gain"] < 0.999
        # converged once it had the fewest trials that may converge it, or later (a noisy
        # best, a round of candidates measured before); no round measured after that
        assert task["converged_at"] >= least
        assert task["searched"] == task["converged_at"]
        assert task["trials"] >= 1 + least  # its default schedule, its rounds
    assert out["trials_measured"] == sum(t["trials"] for t in tasks) < 400
    # the database keeps how each task ended, for db list, plan and the dashboard
    stored = stored_task_ends(Storage(f"sqlite:///{tmp_path / 'converged'}.db"), out["job_id"])
    assert [(r["name"], r["trials"], r["converged"], r["converged_at"]) for r in stored] == [
        (t["name"], t["trials"], True, t["converged_at"]) for t in tasks
    ]
    assert all(r["workload_id"] is not None and r["weight"] >= 1 for r in stored)
    # db list shows, per kernel x bucket, the latest job's convergence
    listed = runner.invoke(
        app, ["db", "list", "--json", "--db", f"sqlite:///{tmp_path}/converged.db"]
    )
    assert listed.exit_code == 0, listed.output
    by_id = {w["id"]: w for w in json.loads(listed.output)}
    for r in stored:
        w = by_id[r["workload_id"]]
        assert (w["converged"], w["expected_gain"], w["converged_job_id"]) == (
            True, r["expected_gain"], out["job_id"],
        )  # fmt: skip

    fixed = tune_json(tmp_path, "fixed", "--trials", "30")
    assert fixed["stopped_by"] == "trials"
    assert fixed["trials_measured"] == 30
    for task in fixed["tasks"]:
        assert task["converged"] is False
        assert task["converged_at"] is None
        assert 0.0 <= task["expected_gain"] <= 1.0


runner = CliRunner()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--until-converged", "--gain", "0"], "--gain must be between 0 and 1"),
        (["--gain", "1.5"], "--gain must be between 0 and 1"),
        (["--until-converged", "--search", "driver"], "--until-converged needs the pipelined"),
        (["--until-converged", "--transfer"], "--until-converged needs the pipelined"),
    ],
)
def test_bad_convergence_options_are_one_line(
    tmp_path: Path, options: list[str], message: str
) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["tune", str(TINY), "--db", db, *options])
    one_line_error(result, message)
    assert not (tmp_path / "x.db").exists()  # checked before any work
