"""The re-timing benchmark's summary (:mod:`benchmarks.retiming`) on synthetic paired seeds."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.retiming import summarize


def _pair(seed: int, before: float, after: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "before": {"median_ratio": before, "retime_sec": 0.0, "job_wall_sec": 60.0},
        "after": {"median_ratio": after, "retime_sec": 6.0, "job_wall_sec": 66.0},
    }


def test_records_within_3_percent_meet_the_target_and_optimistic_ones_miss_it() -> None:
    seeds = [(0.80, 0.99), (0.75, 1.01), (0.85, 1.0), (0.78, 0.995), (0.82, 1.005)]
    pairs = [_pair(s, b, a) for s, (b, a) in enumerate(seeds)]
    out = summarize(pairs)
    assert out["before"]["median_ratio"] == pytest.approx(0.80)
    assert out["before"]["within_3pct"] == "missed"
    assert out["after"]["median_ratio"] == pytest.approx(1.0)
    assert out["after"]["within_3pct"] == "met"
    assert out["retime_share_of_job_wall"] == pytest.approx(6 / 66)
    few = summarize(pairs[:2])  # two seeds decide nothing
    assert few["after"]["within_3pct"].startswith("undecided")
