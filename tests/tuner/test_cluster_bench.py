"""``tunefarm bench MODEL --address RAY``: tuned vs untuned on a real Ray cluster's devices."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.cli_assert import one_line_error
from tests.conftest import TINY
from tuner.cli import app
from tuner.cluster.bench import parse_devices

runner = CliRunner()


def test_parse_devices() -> None:
    assert parse_devices(None) is None
    assert parse_devices(["cpu,cuda", "llvm", "arm64"]) == ["cpu", "cuda", "arm64"]


def test_unknown_device_kind_is_one_line(sqlite_url: str) -> None:
    result = runner.invoke(
        app, ["bench", str(TINY), "--address", "auto", "--devices", "cpu,tpu", "--db", sqlite_url]
    )
    one_line_error(result, "unknown device kind 'tpu'; valid: cpu, cuda, arm64")


def test_devices_needs_address(sqlite_url: str) -> None:
    result = runner.invoke(app, ["bench", str(TINY), "--devices", "cpu", "--db", sqlite_url])
    one_line_error(result, "--devices needs --address")


def test_target_with_address_is_one_line(sqlite_url: str) -> None:
    args = ["bench", str(TINY), "--address", "auto", "--target", "cuda", "--db", sqlite_url]
    one_line_error(runner.invoke(app, args), "use --devices cpu,cuda,arm64 instead of --target")


@pytest.mark.slow
@pytest.mark.ray
def test_bench_on_cluster(tuned_db, tmp_path) -> None:
    """A head and a CPU node (``tunefarm_cpu``): the tiny model measured on that node's runner,
    tuned from the database; a kind the cluster lacks is one line."""
    import ray
    from ray.cluster_utils import Cluster

    from workers.slots import CPU_RESOURCE

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        node = cluster.add_node(num_cpus=1, resources={CPU_RESOURCE: 1})
        cluster.wait_for_nodes()
        out = tmp_path / "bench.json"
        args = ["bench", str(TINY), "--address", cluster.address, "--db", tuned_db.url]
        result = runner.invoke(app, [*args, "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert "tuned vs untuned" in result.output and "cpu (cpu@" in result.output
        rows = json.loads(out.read_text())["results"]
        assert len(rows) == 1
        row = rows[0]
        assert row["kind"] == "cpu" and row["device"] == f"cpu@{node.node_id[:8]}"
        assert row["error"] is None
        assert row["untuned_sec"] > 0 and row["tuned_sec"] > 0
        assert row["speedup"] == pytest.approx(row["untuned_sec"] / row["tuned_sec"])
        assert row["tuned_share"] == 1.0  # every kernel of the tiny model was tuned
        assert row["fingerprint"]  # reported by the runner that measured it

        # --json: the JSON alone on stdout
        printed = runner.invoke(app, [*args, "--json"])
        assert printed.exit_code == 0, printed.output
        assert json.loads(printed.stdout)["results"][0]["kind"] == "cpu"

        # the cluster lacks cuda: one line
        missing = runner.invoke(app, [*args, "--devices", "cuda"])
        one_line_error(missing, "the cluster has no cuda device (it has: cpu)")
    finally:
        ray.shutdown()
        cluster.shutdown()
