"""Does ``tune --until-converged`` pay? (issue 65, item 2.)

Per workload and seed, a **pair**: a ``--until-converged`` job (trials capped by ``--cap``),
then a fixed-budget job with 4x the trials the converged job spent, each in a fresh SQLite
database, each a ``tunefarm tune --json`` process. The fixed job needs the converged job's
trial count, so the converged job always runs first. Each run keeps its wall time and its
model latency: the sum over tasks of calls x best recorded time (the untuned time for a task
with no valid record). Each finished pair is appended (JSON Lines, with host, CPU model and
commit) to the pairs file; ``--resume FILE`` adds pairs to it later, on any host.

Targets, per workload: final latency within 5% of the 4x job's (paired ratio <= 1.05) in at
most 0.5x its wall time (paired ratio <= 0.5), verdicts by :func:`tuner.paired.judge`
(bootstrap 90% interval: met / missed / undecided with pairs needed); and the converged jobs'
latencies over seeds spread at most 5% (IQR / median; a figure, decided from 5 seeds on).

Usage::

    python -m benchmarks convergence [--workloads mlp qkv transformer] [--seeds 5]
        [--cap 256] [--output FILE.jsonl | --resume FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS
from benchmarks.verdict import append_pair, next_seed, pair_header, pairs_of, resume
from tuner.paired import Judgement, judge

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = "convergence"
WORKLOADS: dict[str, tuple[str, str]] = {
    "mlp": ("examples/mlp_dynamic.py", "b=8,64"),
    "qkv": ("examples/qkv_dynamic.py", "M=8,128"),
    "transformer": ("examples/transformer_block_dynamic.py", "s=16,64"),
}
FACTOR = 4  # the fixed job's trials: this many times the converged job's
LATENCY_TARGET = 1.05  # converged latency / fixed latency
WALL_TARGET = 0.5  # converged wall / fixed wall
SPREAD_TARGET = 0.05  # IQR / median of the converged latencies over seeds
SPREAD_SEEDS = 5


def model_latency(out: dict[str, Any]) -> float:
    """Sum over tasks of calls x best recorded time (untuned time when none is valid)."""
    total = 0.0
    for task in out["tasks"]:
        sec = task.get("best_sec") or task.get("baseline_sec")
        if sec is None:
            raise ValueError(f"task {task['name']} has neither a best nor an untuned time")
        total += task["weight"] * sec
    return total


def tune(workload: str, seed: int, options: list[str]) -> dict[str, Any]:
    """One ``tunefarm tune --json`` job in a fresh database: its output, wall time, latency."""
    model, shape = WORKLOADS[workload]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "tuner.cli", "tune", str(ROOT / model), "--json",
            "--shape", shape, "--db", f"sqlite:///{tmp}/tf.db", "--seed", str(seed), *options,
        ]  # fmt: skip
        start = time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"tune failed ({workload}, seed {seed}): {done.stderr[-1500:]}")
    out = json.loads(done.stdout)
    return {
        "wall_sec": wall,
        "latency_sec": model_latency(out),
        "trials": out["trials_measured"],
        "stopped_by": out.get("stopped_by"),
        "converged_tasks": sum(bool(t.get("converged")) for t in out["tasks"]),
        "tasks": len(out["tasks"]),
    }


def run_pair(workload: str, seed: int, cap: int, gain: float) -> dict[str, Any]:
    """The converged job, then the fixed job with FACTOR x its trials."""
    conv = tune(workload, seed, ["--trials", str(cap), "--until-converged", "--gain", str(gain)])
    fixed = tune(workload, seed, ["--trials", str(FACTOR * max(conv["trials"], 1))])
    return {
        "benchmark": BENCHMARK,
        "workload": workload,
        "seed": seed,
        **pair_header(),
        "settings": {"cap": cap, "gain": gain},
        "runs": [conv | {"variant": "converged"}, fixed | {"variant": f"fixed-{FACTOR}x"}],
    }


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The pairs of this benchmark in a pairs file."""
    return pairs_of(path, BENCHMARK)


def _ratio(pair: dict[str, Any], key: str) -> float:
    conv, fixed = pair["runs"]
    return conv[key] / fixed[key]


def iqr_spread(values: list[float]) -> float | None:
    """Interquartile range / median (None under 2 values)."""
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(values)


def summary(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: the latency and wall-time verdicts and the seeds' spread."""
    out = []
    for workload in dict.fromkeys(p["workload"] for p in pairs):
        mine = [p for p in pairs if p["workload"] == workload]
        row: dict[str, Any] = {"workload": workload, "pairs": len(mine)}
        for name, key, target in (
            ("latency", "latency_sec", LATENCY_TARGET),
            ("wall", "wall_sec", WALL_TARGET),
        ):
            j: Judgement = judge([math.log(_ratio(p, key)) for p in mine], target)
            row[name] = {
                "target": target,
                "ratio": j.interval.ratio,
                "interval": [j.interval.low, j.interval.high],
                "verdict": j.verdict,
                "pairs_needed": j.needed,
            }
        spread = iqr_spread([p["runs"][0]["latency_sec"] for p in mine])
        decided = spread is not None and len(mine) >= SPREAD_SEEDS
        row["spread"] = {
            "target": SPREAD_TARGET,
            "value": spread,
            "verdict": ("met" if spread <= SPREAD_TARGET else "missed") if decided else "undecided",
        }
        out.append(row)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def table(rows: list[dict[str, Any]]) -> str:
    """The verdicts as a markdown table."""
    lines = [
        "| workload | pairs | latency conv/4x (90% CI) | verdict | wall conv/4x (90% CI) "
        "| verdict | seeds' spread | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(v: dict[str, Any]) -> str:
        low, high = v["interval"]
        return f"{v['ratio']:.2f}x ({low:.2f}–{high:.2f})"

    def verdict(v: dict[str, Any]) -> str:
        need = v.get("pairs_needed")
        return v["verdict"] + (f" (~{need} pairs)" if v["verdict"] == "undecided" and need else "")

    for r in rows:
        s = r["spread"]
        lines.append(
            f"| {r['workload']} | {r['pairs']} | {cell(r['latency'])} | {verdict(r['latency'])} "
            f"| {cell(r['wall'])} | {verdict(r['wall'])} "
            f"| {_pct(s['value'])} | {s['verdict']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks convergence")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=["mlp"])
    parser.add_argument("--seeds", type=int, default=5, help="Pairs to add per workload.")
    parser.add_argument("--cap", type=int, default=256, help="The converged job's trial cap.")
    parser.add_argument("--gain", type=float, default=0.02, help="--until-converged's --gain.")
    parser.add_argument("--output", type=Path, help="A new pairs file (.jsonl).")
    parser.add_argument("--resume", type=Path, help="Add pairs to this pairs file.")
    parser.add_argument("--summary", action="store_true", help="Only print FILE's verdicts.")
    args = parser.parse_args(argv)
    if args.resume is not None:
        path, pairs = args.resume, resume(parser, args, BENCHMARK)
    else:
        path = args.output or RESULTS / f"convergence_{time.strftime('%Y%m%d_%H%M')}.jsonl"
        pairs = []
    if not args.summary:
        for workload in args.workloads:
            for _ in range(args.seeds):
                seed = next_seed(pairs, {"workload": workload})
                pair = run_pair(workload, seed, args.cap, args.gain)
                append_pair(path, pair)
                pairs.append(pair)
                print(json.dumps(pair["runs"]), flush=True)
    print(table(summary(pairs)))
    print(f"pairs file: {path}")
    return 0
