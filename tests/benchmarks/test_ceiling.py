"""benchmarks/ceiling: the search-throughput part runs a real evolutionary search; the scaling
part spreads real search actors over a real two-node Ray cluster."""

from __future__ import annotations

import json

import pytest

from benchmarks.ceiling import main


@pytest.mark.slow
def test_search_throughput_counts_real_candidates(tmp_path) -> None:
    out = tmp_path / "ceiling.json"
    args = ["--parts", "search", "--rounds", "2", "--repeats", "1", "--out", str(out)]
    assert main(args) == 0
    (row,) = json.loads(out.read_text())["search"]
    assert row["round"] == 2 and row["population"] == 64  # a job's population for rounds of 2
    assert row["wall_s"]["n"] == 1 and row["candidates_per_core_s"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_search_scaling_puts_one_actor_on_each_node(tmp_path) -> None:
    out = tmp_path / "ceiling.json"
    args = ["--parts", "scaling", "--scaling-rounds", "1", "--repeats", "1", "--out", str(out)]
    assert main(args) == 0
    scaling = json.loads(out.read_text())["scaling"]
    assert scaling["one_node"]["actor_nodes"] == 1 and scaling["two_nodes"]["actor_nodes"] == 2
    assert scaling["one_node"]["median"] > 0 and scaling["speedup"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_head_ceiling_records_every_simulated_candidate(sqlite_url) -> None:
    from benchmarks.ceiling import head_ceiling
    from database import Storage
    from database.queries import stats

    row = head_ceiling(sqlite_url, candidates=8, per_round=4, devices=2)
    assert row["candidates"] == 8 and row["candidates_per_s"] > 0
    assert 0 < row["database_share"] < 1
    # the warm-up round and the timed rounds each stored one record per candidate
    assert stats(Storage(sqlite_url, create=False))["records"] == 12


@pytest.mark.slow
def test_footprint_measures_a_real_candidate_and_search_tasks(tmp_path) -> None:
    out = tmp_path / "ceiling.json"
    args = ["--parts", "footprint", "--footprint-tasks", "2", "--out", str(out)]
    assert main(args) == 0
    fp = json.loads(out.read_text())["footprint"]
    assert fp["candidates"] >= 1 and fp["tasks"] == 2
    # a scheduled matmul's TVM JSON and its shared library: kilobytes, not bytes
    assert fp["module_json_bytes"]["median"] > 1000 and fp["artifact_bytes"]["median"] > 1000
    assert fp["record_row_bytes"]["median"] > 100 and fp["build_sec"]["median"] > 0


def _result(head: float) -> dict:
    one = {"median": 1.0, "spread": 0.0, "n": 1, "min": 1.0}
    return {
        "machine": {"cpu": "test", "hostname": "test"},
        "search": [
            {"round": 16, "candidates_per_core_s": 5.0, "wall_s": one},
            {"round": 64, "candidates_per_core_s": 20.0, "wall_s": one},
        ],
        "scaling": {"noisy": False, "speedup": 1.9},
        "head": [
            {"backend": "sqlite", "candidates_per_s": 2 * head, "spread": 0.0, "database_share": 0},
            {"backend": "postgresql", "candidates_per_s": head, "spread": 0.0, "database_share": 0},
        ],
        "footprint": {
            "module_json_bytes": {"median": 20 * 1024},
            "artifact_bytes": {"median": 25 * 1024},
            "record_row_bytes": {"median": 2 * 1024},
            "build_sec": {"median": 0.5},
            "search_task_mb": 10.0,
        },
    }


def test_farm_model_finds_where_one_head_runs_out() -> None:
    from benchmarks.ceiling import farm_model

    rows = {r["devices"]: r for r in farm_model(_result(head=500.0))}
    small, large = rows[100], rows[1_000]
    assert small["heads"] == 1 and small["throughput_per_s"] == 100
    assert small["build_cores"] == 50 and small["search_cores"] == 5  # rounds of 64: 20/core-s
    assert small["head_load"] == pytest.approx(0.2)  # the slower backend's ceiling counts
    assert small["head_mb_per_s"] == pytest.approx(100 * 70 / 1024)  # module + artifact twice
    assert small["db_commits_per_s"] == pytest.approx(100 / 64)
    assert small["search_memory_gb"] == pytest.approx(5 * 10 / 1024)
    assert large["heads"] == 2 and large["throughput_per_s"] == 500
    assert large["bottleneck"] == "the head: 2 heads (jobs) needed"
    assert small["bottleneck"] == "the cluster's cores (55 for builds and search); not the head"


def test_scaling_report_replaces_only_its_section(tmp_path) -> None:
    from benchmarks.ceiling import write_scaling_report

    report = tmp_path / "scaling.md"
    report.write_text(
        "# Scaling\nprose\n<!-- scaling:generated -->\nold\n<!-- /scaling:generated -->\nend\n"
    )
    write_scaling_report(_result(head=500.0), tmp_path / "r.json", report)
    text = report.read_text()
    assert text.startswith("# Scaling\nprose\n") and text.endswith("end\n")
    assert "old" not in text and "| 10,000 | 10,000 | 500 |" in text
    report.write_text("no markers")
    with pytest.raises(SystemExit):
        write_scaling_report(_result(head=500.0), tmp_path / "r.json", report)
