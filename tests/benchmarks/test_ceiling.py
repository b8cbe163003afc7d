"""benchmarks/ceiling: the search-throughput part runs a real evolutionary search; the scaling
part spreads real search actors over a real two-node Ray cluster."""

from __future__ import annotations

import json

import pytest

from benchmarks.ceiling import main


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
