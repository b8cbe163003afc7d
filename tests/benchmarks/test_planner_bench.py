"""The planner benchmark (``python -m benchmarks planner``): its profiles, the bucket choices it
compares the plan against, its summary, and (slow) one planned run end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.planner import (
    PROFILES,
    WORKLOADS,
    _run_one,
    hand_buckets,
    make_profile,
    quantile,
    summarize,
    table_lines,
)
from tuner.planner import powers_of_two, tileable


@pytest.mark.parametrize("kind", PROFILES)
def test_profiles_are_deterministic_and_within_the_bound(kind: str) -> None:
    hist = make_profile(kind, 256)
    assert hist == make_profile(kind, 256)
    assert min(hist) >= 1 and max(hist) <= 256 and sum(hist.values()) == 20_000
    if kind == "narrow":
        assert 25 <= quantile(hist, 0.5) <= 35 and max(hist) < 64
    if kind == "bimodal":  # little traffic between the two modes
        assert quantile(hist, 0.5) < 16 and quantile(hist, 0.7) > 64
    if kind == "long-tail":
        assert quantile(hist, 0.5) < 40 and quantile(hist, 0.99) > 150


def test_bucket_choices() -> None:
    assert [tileable(v, 256) for v in (1, 3, 8, 9, 17, 300)] == [1, 4, 8, 16, 24, 256]
    hist = {3: 10, 30: 80, 90: 10}
    assert quantile(hist, 0.5) == 30 and quantile(hist, 0.95) == 90
    assert powers_of_two(hist, 256) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert powers_of_two({40: 1, 60: 1}, 48) == [32]  # the bound caps the one above
    assert hand_buckets(hist, 256) == {"hand-a": [32, 96], "hand-b": [32, 96]}
    with pytest.raises(ValueError, match="unknown profile 'flat'"):
        make_profile("flat", 64)


def _runs(means: dict[str, list[float]], predicted: float | None = None) -> list[dict]:
    out = []
    for strategy, vals in means.items():
        for seed, v in enumerate(vals):
            r = {"strategy": strategy, "seed": seed, "mean_sec": v, "buckets": [8]}
            if strategy == "planned" and predicted is not None:
                r["predicted_sec"] = predicted
            out.append(r)
    return out


def test_summary_ratios_take_the_better_hand_choice_and_flag_noise() -> None:
    runs = _runs(
        {"planned": [8, 8, 9], "pow2": [10, 10, 11], "hand-a": [12, 12, 12], "hand-b": [9, 9, 9]},
        predicted=7.2,
    )
    s = summarize(runs)
    assert s["best_hand"] == "hand-b" and s["noisy"] == []
    assert s["planned_vs_pow2"] == pytest.approx(0.8)
    assert s["planned_vs_best_hand"] == pytest.approx(8 / 9)
    assert s["predicted_vs_measured"] == pytest.approx(0.9)
    noisy = summarize(_runs({"planned": [8, 12], "pow2": [10, 10]}))
    assert noisy["noisy"] == ["planned"] and noisy["planned_vs_best_hand"] is None
    failed = summarize([{"strategy": "planned", "error": "tune failed: x"}])
    assert failed["planned_vs_pow2"] is None and failed["median_sec"] == {}
    data = {"trials": 8, "seeds": [0, 1, 2], "cases": []}
    data["cases"].append({"model": "mlp", "profile": "narrow", "runs": runs, "summary": s})
    (row,) = [line for line in table_lines(data) if line.startswith("| mlp")]
    assert "| 0.80x | 0.89x | 0.90x (0.90x) | - | - |" in row and "8000000.0 (8)" in row
    # a run benched while other processes took CPU is named, its figure kept
    runs[1]["other_cores"], runs[4]["other_cores"] = 0.4, 0.01
    assert summarize(runs)["disturbed"] == ["planned@1"]
    data["cases"][0]["summary"] = summarize(runs)
    (row,) = [line for line in table_lines(data) if line.startswith("| mlp")]
    assert row.endswith("| - | planned@1 |")


@pytest.mark.slow
def test_a_planned_run_plans_tunes_and_benches_over_the_profile(tmp_path: Path) -> None:
    """``plan --json`` then ``tune --shape-profile`` then ``bench --shape-profile`` on a fresh
    database: the prediction, the plan's buckets and the measured traffic mean come back."""
    model, var, bound = WORKLOADS["mlp"]
    profile = tmp_path / "profile.json"
    hist = make_profile("narrow", bound)
    profile.write_text(json.dumps({var: {str(v): c for v, c in hist.items()}}))
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    r = _run_one(model, var, profile, "planned", None, 6, 0, env, tmp_path)
    assert "error" not in r, r.get("error")
    assert r["predicted_sec"] > 0 and r["buckets"] and r["trials_measured"] <= 6
    assert len(r["stage_buckets"]) == 2  # re-planned once (--stages 2)
    assert set(r["buckets"]) == {b for bs in r["stage_buckets"] for b in bs}
    assert 0 < r["mean_sec"] < r["untuned_mean_sec"] * 2
    assert r["other_cores"] is not None  # the bench's foreign load, measured
    assert (tmp_path / "planned-0.db").exists()
    # a bucket set tuned under one profile is benched over another without tuning again
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({var: {"4": 50, str(bound // 4): 50}}))
    shared = _run_one(
        model,
        var,
        wide,
        "pow2",
        r["buckets"],
        6,
        0,
        env,
        tmp_path,
        tuned={**r, "profile": "narrow"},
    )
    assert "error" not in shared, shared.get("error")
    assert shared["tune_shared_with"] == "narrow" and shared["db"] == r["db"]
    assert shared["tune_wall_sec"] == r["tune_wall_sec"] and shared["buckets"] == r["buckets"]
    assert shared["mean_sec"] != r["mean_sec"]  # another traffic, measured
    assert not (tmp_path / "pow2-0.db").exists()
