"""benchmarks/ceiling: the search-throughput part runs a real evolutionary search."""

from __future__ import annotations

import json

from benchmarks.ceiling import main


def test_search_throughput_counts_real_candidates(tmp_path) -> None:
    out = tmp_path / "ceiling.json"
    assert main(["--rounds", "2", "--repeats", "1", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["search"]
    assert row["round"] == 2 and row["population"] == 64  # a job's population for rounds of 2
    assert row["wall_s"]["n"] == 1 and row["candidates_per_core_s"] > 0
