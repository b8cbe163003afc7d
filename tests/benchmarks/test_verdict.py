"""Benchmark verdicts from paired seeds (:mod:`benchmarks.verdict`): pairs files and older
results files read as pairs, pooled, judged; the run order alternating from pair to pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.planner import PROTOCOL as PLANNER_PROTOCOL
from benchmarks.time_to_quality import pair_order
from benchmarks.verdict import (
    TARGETS,
    PairsError,
    alternate,
    append_pair,
    last_settings,
    main,
    next_seed,
    pair_header,
    read_pairs,
    table,
    ttq_observation,
    verdicts,
)

ROOT = Path(__file__).resolve().parents[2]


def _run(variant: str, seed: int, curve: list[tuple[float, float]], wall: float) -> dict:
    return {"variant": variant, "seed": seed, "wall_sec": wall, "curve": [list(p) for p in curve]}


def _ttq_pair(seed: int, cold_to: float, stock_to: float, workload: str = "mlp") -> dict:
    """A pair whose cold run and stock both end at 10 us, reaching it at the given times."""
    return {
        "benchmark": "time-to-quality",
        "workload": workload,
        "seed": seed,
        "settings": {"trials_per_task": 64, "budget": "wall"},
        "cpu": "cpu",
        "runs": [
            _run("stock", seed, [(1.0, 30e-6), (stock_to, 10e-6)], 100.0),
            _run("tunefarm", seed, [(1.0, 20e-6), (cold_to, 10e-6)], 100.0),
        ],
    }


def _cold_row(pairs: list[dict]):
    (row,) = [r for r in verdicts(pairs) if r.target.variant == "tunefarm"]
    return row


def test_time_to_quality_pairs_are_judged_head_to_head() -> None:
    met = [_ttq_pair(s, 40.0 + s, 80.0) for s in range(6)]  # ~0.5x
    assert _cold_row(met).judgement.verdict == "met"
    missed = [_ttq_pair(s, 76.0 + 2 * s, 80.0) for s in range(6)]  # ~1x
    assert _cold_row(missed).judgement.verdict == "missed"
    noisy = [_ttq_pair(s, t, 80.0) for s, t in enumerate((30.0, 90.0, 45.0, 70.0))]
    row = _cold_row(noisy)
    assert row.judgement.verdict == "undecided" and row.judgement.needed > 4
    assert "undecided (~" in table([row])


def test_a_run_that_never_reached_the_level_counts_its_wall_time_as_a_bound() -> None:
    pair = _ttq_pair(0, 40.0, 80.0)
    pair["runs"][0]["curve"] = [[1.0, 30e-6], [80.0, 20e-6]]  # stock never within 90%
    obs = ttq_observation(pair, "tunefarm", "stock")
    assert obs.ratio == pytest.approx(40.0 / 100.0) and obs.bound == "upper"
    pair["runs"][1]["curve"] = [[1.0, 40e-6]]  # now stock has the better final
    obs = ttq_observation(pair, "tunefarm", "stock")
    assert obs.ratio == pytest.approx(100.0 / 80.0) and obs.bound == "lower"
    assert ttq_observation(pair, "tunefarm-warm", "stock") is None  # no such run


def _planner_pair(seed: int, means: dict[str, float], profile: str = "narrow") -> dict:
    runs = [{"strategy": k, "seed": seed, "mean_sec": v} for k, v in means.items()]
    return {"benchmark": "planner", "model": "mlp", "profile": profile, "seed": seed, "runs": runs}


def test_planner_pairs_compare_with_pow2_and_the_better_hand_choice() -> None:
    pairs = [
        _planner_pair(s, {"planned": 7.0 + 0.1 * s, "pow2": 10.0, "hand-a": 12.0, "hand-b": 8.0})
        for s in range(5)
    ]
    rows = {r.target.baseline: r for r in verdicts(pairs)}
    assert rows["pow2"].judgement.verdict == "met"  # 0.71x <= 0.85x
    best = rows["best-hand"]
    assert best.baseline == "hand-b"  # the better hand over the cell's pairs
    assert best.judgement.interval.ratio == pytest.approx(7.2 / 8.0, rel=0.01)
    assert best.judgement.verdict == "undecided"  # 0.9x: on the target
    failed = [_planner_pair(0, {"pow2": 10.0})]
    failed[0]["runs"].append({"strategy": "planned", "seed": 0, "error": "tune failed"})
    (row, *_) = verdicts(failed)
    assert row.judgement is None and "no pair ran both" in table([row])


def test_pairs_are_appended_one_a_line_and_a_cut_off_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "run.pairs.jsonl"
    for seed in range(2):
        append_pair(path, _ttq_pair(seed, 40.0, 80.0) | pair_header())
    with path.open("a") as f:
        f.write('{"benchmark": "time-to-quality", "runs": [')  # killed while writing
    pairs = read_pairs(path)
    assert [p["seed"] for p in pairs] == [0, 1]
    assert pairs[0]["cpu"] and "commit" in pairs[0] and pairs[0]["host"]
    assert last_settings(pairs) == {"trials_per_task": 64, "budget": "wall"}
    assert next_seed(pairs, {"workload": "mlp"}) == 2
    assert next_seed(pairs, {"workload": "qkv"}) == 0


def test_a_resumed_file_pools_with_another_hosts_file(tmp_path: Path, capsys) -> None:
    first, second = tmp_path / "a.pairs.jsonl", tmp_path / "b.pairs.jsonl"
    for s in range(2):
        append_pair(first, _ttq_pair(s, 40.0 + s, 80.0) | {"cpu": "AMD EPYC"})
    append_pair(first, _ttq_pair(2, 42.0, 80.0) | {"cpu": "Intel Xeon"})  # resumed elsewhere
    for s in range(3):
        append_pair(second, _ttq_pair(s, 41.0, 82.0))
    rows = verdicts(read_pairs(first) + read_pairs(second))
    cold = _cold_row(read_pairs(first) + read_pairs(second))
    assert cold.judgement.interval.pairs == 6 and cold.sources == (first.name, second.name)
    assert {"AMD EPYC", "Intel Xeon"} <= set(cold.cpus)
    assert len(rows) == 1  # no warm run: no warm row
    assert main([str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "| mlp | 6 |" in out and "**met**" in out
    assert main([str(first), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["pairs"] == 3 and row["verdict"] == "met"


def test_bad_files_are_a_one_line_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    assert main([str(bad)]) == 1
    assert main([str(tmp_path / "missing.jsonl")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and "no time-to-quality or planner pairs" in err[0]
    assert "missing.jsonl" in err[1]
    with pytest.raises(PairsError):
        read_pairs(bad)


def test_the_run_order_alternates_from_pair_to_pair() -> None:
    assert alternate(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert alternate(["a", "b", "c"], 1) == ["c", "b", "a"]
    assert alternate(["a", "b", "c"], 3, fixed_first=1) == ["a", "c", "b"]
    variants = ["stock", "tunefarm", "tunefarm-warm", "stock-long"]
    # at a wall budget stock's wall time is the budget: it stays first, stock-long last
    assert pair_order(variants, 1, "wall") == ["stock", "tunefarm-warm", "tunefarm", "stock-long"]
    assert pair_order(variants, 2, "wall") == ["stock", "tunefarm", "tunefarm-warm", "stock-long"]
    assert pair_order(variants, 1, "trials") == [
        "tunefarm-warm",
        "tunefarm",
        "stock",
        "stock-long",
    ]


def test_resume_takes_a_pairs_file(tmp_path: Path) -> None:
    from benchmarks.planner import main as planner_main
    from benchmarks.time_to_quality import main as ttq_main

    old = tmp_path / "old.json"
    old.write_text("{}")
    for run in (ttq_main, planner_main):
        with pytest.raises(SystemExit):  # a results JSON cannot be appended to
            run(["--resume", str(old)])
        with pytest.raises(SystemExit):  # nor a file that is not there
            run(["--resume", str(tmp_path / "none.pairs.jsonl")])
    planner_only = tmp_path / "p.pairs.jsonl"
    append_pair(planner_only, _planner_pair(0, {"planned": 1.0}))
    with pytest.raises(SystemExit):  # no time-to-quality pairs to continue
        ttq_main(["--resume", str(planner_only)])
    assert set(PLANNER_PROTOCOL) >= {"trials", "stages", "strategies"}


def test_older_results_files_read_as_pairs() -> None:
    """The committed results of earlier runs: each seed of a workload (or of a model and
    profile) is a pair, and every target they cover gets a row."""
    results = ROOT / "benchmarks" / "results"
    ttq = read_pairs(results / "2026-12-02b-vm-time-to-quality-mlp-64-wall-history-per-seed.json")
    assert [p["seed"] for p in ttq] == [0, 1, 2, 3, 4]
    assert {r["variant"] for r in ttq[0]["runs"]} == {"stock", "tunefarm", "tunefarm-warm"}
    planner = read_pairs(results / "2026-12-01-vm-planner-mlp-search-residual-3seeds.json")
    assert len(planner) == 9  # 3 profiles x 3 seeds
    rows = verdicts(ttq + planner)
    assert {(r.target, r.judgement.interval.pairs) for r in rows if r.judgement} >= {
        (TARGETS[0], 5),
        (TARGETS[1], 5),
        (TARGETS[2], 3),
    }
