"""Symbolic-shape benchmark: one module for every value, fast near every bucket.

For each model (the dynamic MLP and the dynamic transformer block), tune every bucket at a
stated budget, build one module, and measure side by side in one run:

- per value (on and off the buckets): tuned module vs the untuned default build vs numpy;
- off-bucket values against their nearest on-bucket value (rows per second);
- kernel level: each range kernel (padded, transplanted trace) against the static kernel tuned
  at its bucket, both timed here.

Usage: ``python -m benchmarks symbolic [--trials-per-task 32] [--models mlp transformer]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from rich.console import Console
from rich.table import Table

from benchmarks.common import machine_header, results_path
from database import Storage, TuneFarmDatabase
from tuner.bench.run import bench, sweep_values
from tuner.cli.render import LiveProgress
from tuner.fastimport import preload_tensor_intrin
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.pipeline import normalize, prepare
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, upper_bounds
from tuner.symbolic.rangekernel import transplant
from tuner.targets import resolve_target
from workers.config import MeasureConfig

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "mlp": ("examples/mlp_dynamic.py", {"b": [1, 8, 32, 128]}),
    "transformer": ("examples/transformer_block_dynamic.py", {"s": [16, 64, 128]}),
}


def _time_kernel(func: tvm.tirx.PrimFunc, target: Any, args: list[Any]) -> float:
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    lib = tvm.driver.build(mod, target=target)
    timer = lib.time_evaluator("main", tvm.cpu(), number=3, repeat=5, min_repeat_ms=50)
    return statistics.median(timer(*args).results)


def _kernel_args(func: tvm.tirx.PrimFunc, m: int | None) -> list[Any]:
    from tuner.bench.timing import eval_dim

    rng = np.random.default_rng(0)
    args: list[Any] = []
    for param in func.params:
        shape = getattr(param, "shape", None)
        if shape is None:  # the scalar m of a padded kernel
            args.append(m)
            continue
        dims = [eval_dim(d, {"m": m or 0}) for d in shape]
        args.append(tvm.runtime.tensor(rng.standard_normal(dims).astype(str(param.dtype))))
    return args


def range_vs_static(
    model_path: Path, target: Any, db: TuneFarmDatabase, buckets: dict[str, list[int]]
) -> list[dict[str, Any]]:
    """Each range kernel at its bucket value vs the static kernel tuned there (same run).

    Every bucket's range kernel is made here (whether or not the build's dispatch uses it)."""
    preload_tensor_intrin()
    model = load_model(model_path)
    prepared = prepare(model.mod, target)
    rows = []
    static_tasks = {bt.task.name: bt for bt in bucket_tasks(model.mod, target, buckets)}
    for name, bt in static_tasks.items():
        base, (var, value) = name.split("[", 1)[0], next(iter(bt.bucket.items()))
        found = db.best(bt.task.mod, target)
        if found is None or base not in [gv.name_hint for gv in prepared.functions]:
            continue
        rk = transplant(normalize(prepared[base])["main"], found.record.trace, var)
        if rk is None:
            continue
        sch = tvm.s_tir.Schedule(bt.task.mod)
        found.record.trace.apply_to_schedule(sch, remove_postproc=False)
        static_func = sch.mod["main"]
        range_func = rk.func
        tile = rk.tile
        m = math.ceil(value / tile)
        static_sec = _time_kernel(static_func, target, _kernel_args(static_func, None))
        range_sec = _time_kernel(range_func, target, _kernel_args(range_func, m))
        rows.append(
            {
                "kernel": base,
                "bucket": value,
                "tile": tile,
                "static_sec": static_sec,
                "range_sec": range_sec,
                "range_vs_static": static_sec / range_sec,
            }
        )
    return rows


def task_speedups(
    model_path: Path, target: Any, db: TuneFarmDatabase, buckets: dict[str, list[int]]
) -> list[dict[str, Any]]:
    """Per bucket task: the untuned default schedule's and the best record's measured time
    (both from the tune, on the same workers), their ratio and the tuned GFLOPS."""
    rows = []
    for bt in bucket_tasks(load_model(model_path).mod, target, buckets):
        untuned = db.default_schedule_sec(bt.task.mod, target)
        found = db.best(bt.task.mod, target)
        if untuned is None or found is None:
            continue
        try:
            flops = float(tvm.s_tir.analysis.estimate_tir_flops(bt.task.mod))
        except Exception:  # a kernel TVM cannot count
            flops = 0.0
        rows.append(
            {
                "task": bt.task.name,
                "bucket": next(iter(bt.bucket.values())),
                "untuned_sec": untuned,
                "tuned_sec": found[2],
                "speedup": untuned / found[2],
                "tuned_gflops": flops / found[2] / 1e9 if flops else None,
            }
        )
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _job_wall_sec(storage: Storage) -> float | None:
    """Wall time of the first tune job in ``storage`` (the one that tuned it)."""
    from database.queries import job_times

    jobs = list(job_times(storage).values())
    if not jobs or jobs[0][1] is None:
        return None
    started, finished = jobs[0]
    return (finished - started).total_seconds()


def tune_buckets(
    model: Any,
    target: Any,
    storage: Storage,
    buckets: dict[str, list[int]],
    budget: int,
    model_name: str,
    console: Console | None,
) -> Any:
    """The benchmarks' tune of a symbolic model: seed 0, 30 ms timed repeats, ``budget``
    trials over its bucket tasks (the job summary)."""
    return tune(
        model.mod,
        target,
        storage,
        TuneConfig(trials=budget, seed=0, measure=MeasureConfig(min_repeat_ms=30)),
        progress=LiveProgress(console) if console is not None else None,
        buckets=buckets,
        model_name=model_name,
    )


def run_model(
    key: str, trials_per_task: int, console: Console, db_url: str, *, skip_tune: bool = False
) -> dict[str, Any]:
    path, buckets = MODELS[key]
    target = resolve_target("llvm")
    model = load_model(ROOT / path)
    storage = Storage(db_url)
    n_tasks = len(bucket_tasks(model.mod, target, buckets))
    budget = trials_per_task * n_tasks
    if skip_tune:
        wall_sec = _job_wall_sec(storage)
        console.print(f"{key}: reusing {db_url} (tuned in {wall_sec} s)")
    else:
        wall_sec = tune_buckets(model, target, storage, buckets, budget, key, console).wall_sec
    db = TuneFarmDatabase(storage)
    (var, values) = next(iter(choose_buckets(model.mod, buckets).items()))
    sweep = sweep_values(values, upper_bounds(model.mod).get(var))
    results = bench(model, target, db, [{var: v} for v in sweep], repeat=5, min_repeat_ms=50)
    per_value = []
    for v, r in zip(sweep, results, strict=True):
        per_value.append({"value": v, "on_bucket": v in values, **r.to_dict()})
    off = []
    for row in per_value:
        if row["on_bucket"] or row["value"] > max(values):
            continue
        nearest = min(values, key=lambda b: (abs(b - row["value"]), b))
        on = next(p for p in per_value if p["value"] == nearest)
        ratio = (row["value"] / row["tuned_sec"]) / (on["value"] / on["tuned_sec"])
        entry = {"value": row["value"], "nearest": nearest, "throughput_ratio": ratio}
        if row["numpy_sec"] and on["numpy_sec"]:
            # the same ratio for numpy: how much rows/s a library loses there by itself
            # (memory-bound small values run fewer rows in about the same time)
            entry["numpy_throughput_ratio"] = (row["value"] / row["numpy_sec"]) / (
                on["value"] / on["numpy_sec"]
            )
        off.append(entry)
    kernels = range_vs_static(ROOT / path, target, db, buckets)
    tasks = task_speedups(ROOT / path, target, db, buckets)
    big = [p for p in per_value if p["value"] >= 32]
    return {
        "model": path,
        "buckets": {var: values},
        "trials_per_task": trials_per_task,
        "tasks": n_tasks,
        "tune_wall_sec": wall_sec,
        "per_value": per_value,
        "geomean_speedup_vs_untuned": geomean([p["speedup"] for p in per_value]),
        "geomean_vs_numpy": geomean([p["vs_numpy"] for p in per_value if p["vs_numpy"]]),
        "geomean_vs_numpy_ge32": geomean([p["vs_numpy"] for p in big if p["vs_numpy"]]),
        "geomean_speedup_ge32": geomean([p["speedup"] for p in big]),
        "off_bucket": off,
        "range_vs_static": kernels,
        "tasks_tuned_vs_untuned": tasks,
        "all_agree": all(p["agree"] for p in per_value),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks symbolic", description=__doc__)
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--db-dir", type=Path, help="keep the tuning databases here (default: a temp dir)"
    )
    parser.add_argument(
        "--skip-tune", action="store_true", help="bench the databases already in --db-dir"
    )
    args = parser.parse_args(argv)
    console = Console(width=120)
    tmp = tempfile.TemporaryDirectory(prefix="tunefarm-symbolic-")
    db_dir = Path(tmp.name)
    if args.db_dir is not None:
        args.db_dir.mkdir(parents=True, exist_ok=True)
        db_dir = args.db_dir
    elif args.skip_tune:
        parser.error("--skip-tune needs --db-dir (the databases of an earlier run)")
    out: dict[str, Any] = {"machine": machine_header(), "models": {}}
    for key in args.models:
        url = f"sqlite:///{db_dir.resolve()}/{key}.db"
        res = run_model(key, args.trials_per_task, console, url, skip_tune=args.skip_tune)
        out["models"][key] = res
        table = Table(title=f"{key}: {res['trials_per_task']} trials per bucket task")
        for col in ("value", "bucket?", "untuned", "tuned", "numpy", "speedup", "tuned/numpy"):
            table.add_column(col, justify="right")
        for p in res["per_value"]:
            table.add_row(
                str(p["value"]),
                "on" if p["on_bucket"] else "off",
                f"{p['untuned_sec'] * 1e3:.3f} ms",
                f"{p['tuned_sec'] * 1e3:.3f} ms",
                f"{p['numpy_sec'] * 1e3:.3f} ms" if p["numpy_sec"] else "-",
                f"{p['speedup']:.1f}x",
                f"{p['vs_numpy']:.2f}x" if p["vs_numpy"] else "-",
            )
        console.print(table)
        console.print(
            f"geomean speedup vs untuned {res['geomean_speedup_vs_untuned']:.1f}x "
            f"(values >= 32: {res['geomean_speedup_ge32']:.1f}x); geomean tuned/numpy "
            f"{res['geomean_vs_numpy']:.2f}x (>= 32: {res['geomean_vs_numpy_ge32']:.2f}x); "
            f"all outputs agree: {res['all_agree']}"
        )
        for o in res["off_bucket"]:
            numpy = o.get("numpy_throughput_ratio")
            console.print(
                f"  off-bucket {o['value']}: {o['throughput_ratio']:.2f}x the rows/s of "
                f"bucket {o['nearest']}" + (f" (numpy: {numpy:.2f}x)" if numpy is not None else "")
            )
        tasks = Table(title=f"{key}: tasks at buckets >= 32 (tune's own measurements)")
        for col in ("task", "untuned", "tuned", "speedup", "GFLOPS"):
            tasks.add_column(col, justify="right")
        for t in res["tasks_tuned_vs_untuned"]:
            if t["bucket"] >= 32:
                tasks.add_row(
                    t["task"],
                    f"{t['untuned_sec'] * 1e6:.1f} us",
                    f"{t['tuned_sec'] * 1e6:.1f} us",
                    f"{t['speedup']:.1f}x",
                    f"{t['tuned_gflops']:.1f}" if t["tuned_gflops"] else "-",
                )
        console.print(tasks)
        for k in res["range_vs_static"]:
            console.print(
                f"  range kernel {k['kernel']} @ {k['bucket']} (tile {k['tile']}): "
                f"{k['range_vs_static']:.2f}x the static kernel's speed"
            )
    models = "-".join(args.models)
    path = results_path(f"symbolic-{models}")
    path.write_text(json.dumps(out, indent=2))
    console.print(f"wrote {path}")
    return 0 if all(m["all_agree"] for m in out["models"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
