"""The convergence benchmark's machinery: model latency from a tune --json output, the
verdicts and spread of a synthetic paired set, and a pairs file read back and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import convergence as conv
from benchmarks.verdict import append_pair, next_seed


def pair(seed: int, lat: float, wall: float, conv_lat: float = 1e-3) -> dict:
    """A pair whose converged run is ``lat`` x and ``wall`` x the fixed run's."""
    return {
        "benchmark": conv.BENCHMARK, "workload": "mlp", "seed": seed,
        "settings": {"cap": 24, "gain": 0.05},
        "runs": [
            {"variant": "converged", "latency_sec": conv_lat, "wall_sec": 10.0 * wall},
            {"variant": "fixed-4x", "latency_sec": conv_lat / lat, "wall_sec": 10.0},
        ],
    }  # fmt: skip


def test_model_latency_weighs_each_task_and_falls_back_to_untuned() -> None:
    out = {
        "tasks": [
            {"name": "a", "weight": 2, "best_sec": 1e-4, "baseline_sec": 5e-4},
            {"name": "b", "weight": 1, "best_sec": None, "baseline_sec": 3e-4},
        ]
    }
    assert conv.model_latency(out) == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="task c"):
        conv.model_latency({"tasks": [{"name": "c", "weight": 1}]})


def test_verdicts_of_synthetic_pairs() -> None:
    """Latency within 5% and wall well under 0.5x on every pair: both met; a wall ratio
    of 0.8x every time: missed; two pairs only: undecided."""
    tight = [pair(s, 1.0 + 0.005 * (s % 3), 0.2 + 0.01 * s) for s in range(8)]
    row = conv.summary(tight)[0]
    assert row["pairs"] == 8
    assert row["latency"]["verdict"] == "met" and row["wall"]["verdict"] == "met"
    slow = [pair(s, 1.0, 0.8 + 0.01 * (s % 2)) for s in range(8)]
    assert conv.summary(slow)[0]["wall"]["verdict"] == "missed"
    few = conv.summary(tight[:2])[0]
    assert few["latency"]["verdict"] == "undecided" and few["spread"]["verdict"] == "undecided"
    assert "undecided" in conv.table([few])


def test_spread_is_iqr_over_median_decided_from_five_seeds() -> None:
    assert conv.iqr_spread([1.0]) is None
    assert conv.iqr_spread([1.0, 1.0, 1.0]) == 0.0
    same = [pair(s, 1.0, 0.3, conv_lat=1e-3) for s in range(5)]
    assert conv.summary(same)[0]["spread"] == {"target": 0.05, "value": 0.0, "verdict": "met"}
    wide = [pair(s, 1.0, 0.3, conv_lat=1e-3 * (1 + 0.2 * s)) for s in range(5)]
    assert conv.summary(wide)[0]["spread"]["verdict"] == "missed"


def test_a_pairs_file_is_read_back_and_resumed_with_the_next_seed(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    for s in range(2):
        append_pair(path, pair(s, 1.0, 0.3))
    with path.open("a") as f:
        f.write('{"benchmark": "convergence", "cut sh')  # a killed run's last line
    pairs = conv.read_pairs(path)
    assert [p["seed"] for p in pairs] == [0, 1]
    assert next_seed(pairs, {"workload": "mlp"}) == 2
    assert json.loads(path.read_text().splitlines()[0])["runs"][0]["variant"] == "converged"
    # --summary with --resume reads the file and runs nothing
    assert conv.main(["--resume", str(path), "--summary"]) == 0
    assert len(conv.read_pairs(path)) == 2


def test_resume_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        conv.main(["--resume", str(tmp_path / "none.jsonl"), "--summary"])
    assert err.value.code == 2
