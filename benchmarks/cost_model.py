"""Cost-model benchmark: the same tuning task cold vs warm-started from a team database.

1. Fill a database by tuning *other* buckets of a kernel family (``--other-buckets``) with the
   stock cost model: the team's history.
2. Tune the target bucket (``--bucket``, a workload absent from that history) three ways at the
   same budget, each in its own run: ``cold_xgb`` (stock MetaSchedule: fresh database, stock
   XGBModel), ``cold_tunefarm`` (our model, no pre-training), ``warm_tunefarm`` (our model
   warm-started from a copy of the team database: the default), ``seeded_xgb`` (stock model,
   the search seeded with the other buckets' best schedules, refitted: ``--transfer``,
   :mod:`database.transfer`) and ``warm_tunefarm_seeded`` (both). The snapshot training at
   job start counts in the warm runs' wall time.
3. Report, per run: best latency at the budget; trials and wall seconds to reach 90% of the
   cold run's final best (throughput); and the ranking metrics of ``tunefarm cost-model eval``
   on the final database (ours vs stock XGBModel vs random).

Usage: ``python -m benchmarks cost-model [--trials 64] [--pretrain-trials 96] [--seeds 0 1]``.
Results: ``benchmarks/results/<date>-<hostname>-cost-model.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.common import geomean, machine_header, results_path
from database import Storage, TargetKey
from database.queries import job_times, record_timeline
from tuner.cost_model.dataset import load_dataset
from tuner.cost_model.evaluate import compare
from tuner.cost_model.ranker import RankerParams
from tuner.fastimport import preload_tensor_intrin
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.targets import resolve_target
from workers.config import MeasureConfig

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "benchmarks" / "data" / "cm_matmul.py"
# (name, cost model, starts from the team history, seeds from other buckets)
RUNS = (
    ("cold_xgb", "xgb", False, False),
    ("cold_tunefarm", "tunefarm", False, False),
    ("warm_tunefarm", "tunefarm", True, False),
    ("seeded_xgb", "xgb", True, True),
    ("warm_tunefarm_seeded", "tunefarm", True, True),
)


def copy_sqlite(src: Path, dst: Path) -> None:
    """Copy a SQLite database with SQLite's backup API (a file copy misses the WAL)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def _curve(url: str, job_id: int) -> list[tuple[int, float | None, float]]:
    """(trial, latency or None, seconds since job start) for each record of the job."""
    storage = Storage(url, create=False)
    started = job_times(storage)[job_id][0]
    rows = record_timeline(storage, job_id=job_id)
    return [(i + 1, sec, (at - started).total_seconds()) for i, (_, at, sec) in enumerate(rows)]


def _reach(
    curve: list[tuple[int, float | None, float]], latency: float
) -> tuple[int, float] | None:
    for trial, sec, at in curve:
        if sec is not None and sec <= latency:
            return trial, at
    return None


def _best(curve: list[tuple[int, float | None, float]]) -> float | None:
    secs = [sec for _, sec, _ in curve if sec is not None]
    return min(secs) if secs else None


def mean_curves(runs: list[dict[str, Any]], trials: int) -> dict[str, dict[str, Any]]:
    """The average job of each run kind: per trial, the geometric mean over seeds of the best
    latency so far and the mean wall time; trials (and wall) for it to reach 90% of the average
    cold run's final best. One lucky or unlucky seed moves this far less than a per-seed goal,
    whose cold run may hit a near-optimal candidate in its first batch."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_run.setdefault(r["run"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name, rs in by_run.items():
        best, wall = [], []
        for r in rs:
            secs = [sec if sec else math.inf for _, sec, _ in r["curve"]][:trials]
            secs += [secs[-1]] * (trials - len(secs))
            best.append(list(itertools.accumulate(secs, min)))
            at = [a for _, _, a in r["curve"]][:trials]
            wall.append(at + [at[-1]] * (trials - len(at)))
        geo = [
            geomean(b[t] for b in best) if all(math.isfinite(b[t]) for b in best) else math.inf
            for t in range(trials)
        ]
        out[name] = {
            "seeds": len(rs),
            "best_so_far_geomean_sec": geo,
            "wall_mean_sec": [statistics.fmean(w[t] for w in wall) for t in range(trials)],
        }
    cold = out.get(RUNS[0][0])
    if cold is None:
        return out
    goal = cold["best_so_far_geomean_sec"][-1] / 0.9
    for entry in out.values():
        hit = next((t for t, v in enumerate(entry["best_so_far_geomean_sec"]) if v <= goal), None)
        entry["goal_sec"] = goal
        entry["trials_to_90"] = None if hit is None else hit + 1
        entry["wall_to_90_sec"] = None if hit is None else entry["wall_mean_sec"][hit]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cost-model", description=__doc__)
    parser.add_argument("--trials", type=int, default=64, help="budget of each target run")
    parser.add_argument("--pretrain-trials", type=int, default=96, help="history: all buckets")
    parser.add_argument("--bucket", type=int, default=128, help="the target bucket of n")
    parser.add_argument("--other-buckets", default="8,32", help="the history's buckets of n")
    parser.add_argument("--per-iter", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--runs", nargs="*", default=[r[0] for r in RUNS])
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        help="reuse this history (SQLite file); when it does not exist, build it and save it there",
    )
    args = parser.parse_args(argv)
    console = Console(width=120)
    target = resolve_target("llvm")
    key = TargetKey.of(target)
    model = load_model(MODEL)
    measure = MeasureConfig(min_repeat_ms=10, repeat=3)
    tmp = Path(tempfile.mkdtemp(prefix="tunefarm-cm-bench-"))
    history = tmp / "history.db"
    others = [int(v) for v in args.other_buckets.split(",")]
    if args.bucket in others:
        parser.error("--bucket must not be one of --other-buckets")

    start = time.perf_counter()
    if args.history is not None and args.history.is_file():
        console.print(f"[bold]history[/bold]: {args.history}")
        copy_sqlite(args.history, history)
    else:
        console.print(f"[bold]history[/bold]: n in {others}, {args.pretrain_trials} trials")
        config = TuneConfig(
            trials=args.pretrain_trials,
            trials_per_iter=args.per_iter,
            seed=100,
            measure=measure,
            cost_model="xgb",
        )
        tune(model.mod, target, Storage(f"sqlite:///{history}"), config, buckets={"n": others})
        if args.history is not None:  # kept for the next run
            copy_sqlite(history, args.history)
    history_sec = time.perf_counter() - start

    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        for name, cost_model, warm, transfer in RUNS:
            if name not in args.runs:
                continue
            path = tmp / f"{name}-{seed}.db"
            if warm:
                copy_sqlite(history, path)
            url = f"sqlite:///{path}"
            console.print(f"[bold]{name}[/bold] seed {seed}: n={args.bucket}, {args.trials} trials")
            summary = tune(
                model.mod,
                target,
                Storage(url),
                TuneConfig(
                    trials=args.trials,
                    trials_per_iter=args.per_iter,
                    seed=seed,
                    measure=measure,
                    cost_model=cost_model,
                    warm_start=warm,
                    transfer=transfer,
                ),
                buckets={"n": [args.bucket]},
            )
            curve = _curve(url, summary.job_id)
            runs.append(
                {
                    "run": name,
                    "seed": seed,
                    "url": url,
                    "wall_sec": summary.wall_sec,
                    "curve": curve,
                    "best_sec": _best(curve),
                    "first_batch_median_sec": statistics.median(
                        [sec or float("inf") for _, sec, _ in curve[1 : 1 + args.per_iter]]
                    ),
                }
            )

    # 90% of the cold (stock) run's final best, per seed
    for r in runs:
        cold = next(c for c in runs if c["seed"] == r["seed"] and c["run"] == RUNS[0][0])
        goal = cold["best_sec"] / 0.9 if cold["best_sec"] else None
        hit = _reach(r["curve"], goal) if goal else None
        r["goal_sec"] = goal
        r["trials_to_90"] = hit[0] if hit else None
        r["wall_to_90_sec"] = hit[1] if hit else None

    table = Table(
        title=f"n={args.bucket}: {args.trials} trials each; goal = 90% of cold_xgb's best"
    )
    for col in (
        "run",
        "seed",
        "best",
        "1st batch median",
        "trials to goal",
        "wall to goal",
        "wall",
    ):
        table.add_column(col, justify="left" if col == "run" else "right")
    for r in runs:
        table.add_row(
            r["run"],
            str(r["seed"]),
            f"{r['best_sec'] * 1e6:.2f} us" if r["best_sec"] else "-",
            f"{r['first_batch_median_sec'] * 1e6:.1f} us",
            str(r["trials_to_90"] or f">{args.trials}"),
            f"{r['wall_to_90_sec']:.0f} s" if r["wall_to_90_sec"] is not None else "-",
            f"{r['wall_sec']:.0f} s",
        )
    console.print(table)
    average = mean_curves(runs, args.trials)
    for name, entry in average.items():
        console.print(
            f"average {name} over {entry['seeds']} seeds: best "
            f"{entry['best_so_far_geomean_sec'][-1] * 1e6:.2f} us; 90% of the average cold "
            f"run's best after {entry.get('trials_to_90') or '>' + str(args.trials)} trials"
            + (
                f" ({entry['wall_to_90_sec']:.0f} s)"
                if entry.get("wall_to_90_sec") is not None
                else ""
            )
        )

    # ranking quality on the warm run's final database (history + target bucket)
    warm_runs = [r for r in runs if r["run"] == "warm_tunefarm"]
    evaluation = None
    if warm_runs:
        preload_tensor_intrin()
        ds = load_dataset(Storage(warm_runs[0]["url"], create=False), key)
        evaluation = compare(ds, RankerParams(nthread=2))
        table = Table(title=f"ranking quality on {int(ds.valid.sum())} valid records")
        cols = ("model", "split", "pairwise", "recall@5", "peak@1", "peak@5")
        for col in cols:
            table.add_column(col, justify="left" if col in ("model", "split") else "right")
        for name, res in evaluation.items():
            for split in ("chronological", "leave_one_workload_out"):
                m = res[split]
                table.add_row(
                    name,
                    split,
                    *(
                        f"{m[k]:.3f}" if m.get(k) is not None else "-"
                        for k in ("pairwise_accuracy", "recall@5", "peak@1", "peak@5")
                    ),
                )
        console.print(table)

    out = results_path("cost-model")
    for r in runs:
        r.pop("url")
    out.write_text(
        json.dumps(
            {
                "machine": machine_header(),
                "target": str(target),
                "args": vars(args),
                "history_sec": history_sec,
                "runs": runs,
                "average": average,
                "evaluation": evaluation,
            },
            indent=2,
            default=str,
        )
    )
    console.print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
