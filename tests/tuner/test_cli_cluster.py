"""`tunefarm submit/jobs/status/logs/workers` against a real `ray start` cluster (head + node)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import TINY
from tests.ray_processes import RayProcesses, free_port
from tuner.cli import app
from workers.slots import CPU_RESOURCE

runner = CliRunner()
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _one_line_error(result, needle: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert needle in lines[0], lines[0]


def test_unreachable_address_is_one_line() -> None:
    result = runner.invoke(app, ["jobs", "--address", f"http://127.0.0.1:{free_port()}"])
    _one_line_error(result, "cannot reach the Ray cluster")
    result = runner.invoke(app, ["workers", "--address", f"http://127.0.0.1:{free_port()}"])
    _one_line_error(result, "cannot reach the Ray cluster")
    # a Ray Client address names the head: its dashboard is on port 8265
    result = runner.invoke(app, ["submit", str(TINY), "--address", "ray://nope.invalid:1"])
    _one_line_error(result, "dashboard at http://nope.invalid:8265")
    result = runner.invoke(app, ["submit", str(TINY), "--address", "bogus://x"])
    _one_line_error(result, "http://HOST:8265")


def test_submit_options_become_the_jobs_command_and_env() -> None:
    from tuner.cluster.client import job_runtime_env, tune_command

    cmd = tune_command("m.py", {"--trials": 8, "--shape": ["b=1,8", "s=4"], "--db": None}, "py")
    assert cmd == "py -m tuner.cli tune m.py --address auto --trials 8 --shape b=1,8 --shape s=4"
    from tuner.cli.common import TuneOptions

    pair = "--matvec/--no-matvec"  # an on/off pair: its off side is said, not dropped
    assert TuneOptions().flags()[pair] is True
    assert tune_command("m.py", {pair: False}, "py").endswith(" --no-matvec")
    assert tune_command("m.py", {pair: True}, "py").endswith(" --matvec")
    env = job_runtime_env("/w", "10.0.0.5:9190", "rk3588")
    assert env == {
        "working_dir": "/w",
        "env_vars": {"TUNEFARM_RPC_TRACKER": "10.0.0.5:9190", "TUNEFARM_RPC_KEY": "rk3588"},
    }
    result = runner.invoke(app, ["submit", str(TINY), "--rpc-tracker", "nohostport"])
    _one_line_error(result, "HOST:PORT")


@pytest.fixture(scope="module")
def cluster():
    with RayProcesses(worker_resources=[{CPU_RESOURCE: 1}]) as procs:
        yield procs


def test_workers_jobs_submit_status_logs(
    cluster: RayProcesses, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"RAY_AUTH_TOKEN": cluster.token}
    addr = ["--address", cluster.dashboard]

    # a wrong token is refused in one line
    bad = runner.invoke(app, ["jobs", *addr], env={"RAY_AUTH_TOKEN": "0" * 64})
    _one_line_error(bad, "token")

    res = runner.invoke(app, ["workers", *addr, "--json"], env=env)
    assert res.exit_code == 0, res.output
    nodes = json.loads(res.output)
    assert len(nodes) == 2 and all(n["state"] == "ALIVE" for n in nodes)
    assert [n["head"] for n in nodes] == [True, False]
    assert (
        nodes[1]["resources"].get(CPU_RESOURCE) == 1 and f"{CPU_RESOURCE}=1" in nodes[1]["devices"]
    )
    table = runner.invoke(app, ["workers", *addr], env=env)
    assert table.exit_code == 0 and "2/2 nodes alive" in table.output

    db = f"sqlite:///{tmp_path / 'cluster.db'}"
    sub = runner.invoke(
        app,
        [
            "submit",
            str(TINY),
            *addr,
            "--trials",
            "3",
            "--per-iter",
            "2",
            "--db",
            db,
            "--min-repeat-ms",
            "5",
            "--seed",
            "0",
            "--job",
            "cli-test",
            "--python",
            str(Path(os.sys.executable)),
        ],
        env=env,
    )
    assert sub.exit_code == 0, sub.output
    job = sub.output.split("submitted ", 1)[1].split()[0]
    assert job.startswith("tunefarm-cli-test-")

    # while it runs, `workers` may show the device runner (a short job can end between polls)
    seen_runner, deadline = None, time.time() + 240
    while time.time() < deadline:
        st = json.loads(runner.invoke(app, ["status", job, *addr, "--json"], env=env).output)
        if st["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        rows = json.loads(runner.invoke(app, ["workers", *addr, "--json"], env=env).output)
        for r in rows:
            if r["runners"]:
                seen_runner = (r["head"], r["runners"])
        time.sleep(0.5)
    follow = runner.invoke(app, ["logs", job, *addr, "--follow"], env=env)
    assert follow.exit_code == 0, follow.output[-3000:]
    assert "job cli-test" in follow.output and f"job {job} SUCCEEDED" in follow.output
    if seen_runner is not None:
        assert seen_runner[0] is False and seen_runner[1][0].startswith("runner cpu@"), seen_runner
    # the device runner sat on the node that advertises tunefarm_cpu: Ray's state API keeps
    # the job's actors after they end, so this holds however short the job was
    from tuner.cluster.client import RUNNER_CLASSES, state_get

    monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
    worker_node = nodes[1]["node_id"]
    placed = [
        (a.get("node_id"), a.get("repr_name") or "")
        for a in state_get(cluster.dashboard, "actors")
        if a.get("class_name") in RUNNER_CLASSES
    ]
    assert placed and all(nid == worker_node for nid, _ in placed), placed
    assert any(name.startswith("runner cpu@") for _, name in placed), placed

    listed = json.loads(runner.invoke(app, ["jobs", *addr, "--json"], env=env).output)
    mine = [j for j in listed if j["id"] == job]
    assert mine and mine[0]["status"] == "SUCCEEDED" and mine[0]["metadata"]["model"] == TINY.name
    status = runner.invoke(app, ["status", job, *addr], env=env)
    assert status.exit_code == 0 and "SUCCEEDED" in status.output
    logs = runner.invoke(app, ["logs", job, *addr], env=env)
    assert logs.exit_code == 0 and "wall time" in logs.output

    from database import Storage
    from database.queries import stats

    assert stats(Storage(db, create=False))["valid_records"] >= 3
    missing = runner.invoke(app, ["status", "tunefarm-nope", *addr], env=env)
    _one_line_error(missing, "no job 'tunefarm-nope'")


def test_workers_lists_a_gpu_whose_tvm_cannot_run_cuda_as_unusable() -> None:
    import tvm

    if tvm.runtime.enabled("cuda"):
        pytest.skip("this TVM has a CUDA runtime")
    with RayProcesses(worker_resources=[{"GPU": 1}]) as procs:
        env = {"RAY_AUTH_TOKEN": procs.token, "RAY_AUTH_MODE": "token"}
        env["RAY_ADDRESS"] = procs.gcs_address  # the driver that asks the GPU node
        res = runner.invoke(app, ["workers", "--address", procs.dashboard, "--json"], env=env)
        assert res.exit_code == 0, res.output
        rows = {r["gpus"]: r for r in json.loads(res.output)}
        assert rows[0]["gpu_unusable"] is None
        assert "CUDA runtime" in rows[1]["gpu_unusable"], rows[1]
        table = runner.invoke(app, ["workers", "--address", procs.dashboard], env=env)
        assert table.exit_code == 0 and "unusable" in table.output, table.output
