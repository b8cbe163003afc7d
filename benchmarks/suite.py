"""The project's scoreboard: TuneFarm against its anchors, every figure a ratio from one run.

Parts (``--parts``, default all):

- ``kernels``: X[M,768]·W[768,2304] with symbolic M (``examples/qkv_dynamic.py``), tuned by
  TuneFarm at a few M buckets, swept over M on and off them: TuneFarm tuned vs the untuned
  default vs numpy/OpenBLAS vs stock MetaSchedule (``ms.tune_tir`` on the static shape of each
  bucket at the same budget), and the fraction of the peak measured by a large OpenBLAS SGEMM.
  numpy and the SGEMM peak run in a child process that never imports tvm
  (:mod:`benchmarks.baseline`), with as many threads as TVM, interleaved repeat by repeat with
  the TVM timings; a figure whose spread is above 25% or whose rate is above the measured peak
  is reported as invalid, not as a ratio.
- ``examples``: the dynamic MLP example over its batch size (tuned vs untuned vs numpy).
- ``models``: :mod:`benchmarks.models`: a ``.pt2`` and an ``.onnx`` example tuned, then
  ``tunefarm bench`` in a fresh process: tuned / untuned vs PyTorch eager, ``torch.compile`` and
  ONNX Runtime over their symbolic dim, same threads, outputs checked.
- ``efficiency``: best-so-far latency vs trials and vs wall time, TuneFarm vs ``ms.tune_tir`` on
  the same task (the largest bucket) and budget; trials to 90% of the better final.
- ``overhead``: candidates per second, the split of a job's wall time (startup, build, run,
  database, search), dispatch overhead of the symbolic build at each bucket.
- ``database``: ``benchmarks.database`` at small sizes (plus the latest full results file).
- ``cost-model``, ``throughput``: results of ``benchmarks.cost_model`` / ``benchmarks.throughput``
  when those modules exist (their ``suite_part(quick=...)``), else their latest results file.
- ``gpu``: fp32/fp16 matmul over M on CUDA vs torch/cuBLAS; skipped without a GPU.

Writes ``benchmarks/results/<date>-<hostname>.json`` and ``docs/performance.md`` (+ PNG plots in
``docs/img/``). Usage::

    python -m benchmarks suite [--quick] [--parts kernels efficiency ...] [--no-report]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import glob
import importlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.baseline import (
    INVALID_SPREAD,
    MATMUL,
    BaselineProcess,
    baseline_threads,
    interleave,
    invalid_figures,
    invalid_reason,
    measured_peak,
    timed_figures,
)
from benchmarks.common import machine_header, results_path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PARTS = (
    "kernels",
    "examples",
    "models",
    "efficiency",
    "overhead",
    "database",
    "cost-model",
    "throughput",
    "gpu",
)
# stock LocalBuilder's default is 30 s; it starts fresh worker processes every round, which on a
# loaded machine take longer than that to start: a generous limit keeps the race fair
STOCK_BUILD_TIMEOUT_S = 300
NOISY_SPREAD = 0.10  # (max - min) / median over repeats above this flags a figure as noisy
QKV = "examples/qkv_dynamic.py"
MLP = "examples/mlp_dynamic.py"
K, N = 768, 2304


@dataclass(frozen=True)
class Settings:
    """Budgets of one suite run; ``quick`` is for smoke runs and tests."""

    trials_per_bucket: int = 16
    buckets: tuple[int, ...] = (8, 128)
    values: tuple[int, ...] = (1, 8, 32, 128, 512)
    repeats: int = 7
    min_repeat_ms: int = 40
    example_trials_per_task: int = 4
    example_buckets: tuple[int, ...] = (8, 128)
    example_values: tuple[int, ...] = (1, 8, 32, 128, 512)
    db_sizes: tuple[int, ...] = (10_000,)
    peak_n: int = 2048
    # Stock LocalBuilder workers are fresh processes every round, and each imports TVM's
    # tensor-intrinsic registry (~40 s of a core here). True gives them TuneFarm's fast import
    # (a LocalBuilder initializer) so the race compares search, build and measurement.
    stock_fast_import: bool = True
    quick: bool = False

    def __post_init__(self) -> None:
        if self.trials_per_bucket < 0:
            raise ValueError("trials_per_bucket must be >= 0")
        if self.repeats < 3:
            raise ValueError("repeats must be >= 3 (a spread needs repeats)")
        if not self.buckets or any(b < 1 for b in self.buckets):
            raise ValueError("buckets must be positive")

    @classmethod
    def for_quick_run(cls) -> Settings:
        return cls(
            trials_per_bucket=4,
            values=(1, 8, 32, 128),
            repeats=5,
            min_repeat_ms=20,
            example_trials_per_task=2,
            example_values=(1, 8, 32),
            db_sizes=(2_000,),
            peak_n=1024,
            quick=True,
        )


# --------------------------------------------------------------------------- timing
def tvm_timer(func: Any, name: str, dev: Any, args: list[Any], s: Settings) -> Callable[[], float]:
    """One repeat of ``func[name]`` per call (TVM's time evaluator, at least ``min_repeat_ms``):
    a timer for :func:`benchmarks.baseline.interleave`."""
    evaluator = func.time_evaluator(name, dev, number=1, repeat=1, min_repeat_ms=s.min_repeat_ms)
    return lambda: float(evaluator(*args).results[0])


def calibrate_peak(s: Settings, baseline: BaselineProcess) -> dict[str, Any]:
    """The machine's float32 peak as reached by a large OpenBLAS SGEMM in the baseline process
    (away from TVM's threads), plus the nominal peak."""
    n = s.peak_n
    baseline.load("sgemm", MATMUL)
    baseline.set_random_args("sgemm", [(n, n), (n, n)])
    t = baseline.time("sgemm", s.repeats, 200)
    gflops = 2 * n**3 / t["median"] / 1e9
    t["gflops"] = gflops
    return {"sgemm_n": n, "sec": t, "gflops": gflops, "nominal_gflops": nominal_peak_gflops()}


def nominal_peak_gflops() -> float | None:
    """cores x FLOP/cycle x clock from /proc/cpuinfo (AVX2+FMA: 32 fp32 FLOP/cycle)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    mhz = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    per_cycle = 64 if "avx512f" in flags else 32 if "fma" in flags else 8
    return (os.cpu_count() or 1) * per_cycle * max(mhz) / 1e3 if mhz else None


# --------------------------------------------------------------------------- context
@dataclass
class Run:
    """What the parts of one suite run share: settings, target, the tuned databases."""

    settings: Settings
    tmp: str
    log: Callable[[str], None]
    results: dict[str, Any] = field(default_factory=dict)
    baseline: BaselineProcess | None = None
    _target: Any = None
    _tuned: dict[str, Any] | None = None

    @property
    def target(self) -> Any:
        if self._target is None:
            from tuner.targets import resolve_target

            self._target = resolve_target("llvm")
        return self._target


# --------------------------------------------------------------------------- tuning
def tune_qkv(run: Run) -> dict[str, Any]:
    """TuneFarm and stock MetaSchedule on the QKV matmul, one bucket at a time, same budget.

    Each bucket is its own single-task job (TuneFarm) / ``tune_tir`` call (stock), so the
    two see the same task, trials, rounds and measurement settings.
    """
    if run._tuned is not None:
        return run._tuned
    from database import Storage, TuneFarmDatabase
    from tuner.fastimport import preload_tensor_intrin
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.search.population import trials_per_round
    from tuner.symbolic.buckets import bucket_tasks
    from workers.config import MeasureConfig

    s, target = run.settings, run.target
    model = load_model(ROOT / QKV)
    storage = Storage(f"sqlite:///{run.tmp}/tunefarm.db")
    out: dict[str, Any] = {"storage": storage, "model": model, "jobs": {}, "stock": {}}
    out["tasks"] = {
        bt.bucket["M"]: bt.task for bt in bucket_tasks(model.mod, target, {"M": list(s.buckets)})
    }
    if s.trials_per_bucket == 0:
        run._tuned = out
        return out
    run.log("preloading tensor intrinsics (once, outside every timed job)")
    preload_tensor_intrin()
    measure = MeasureConfig(number=3, repeat=3, min_repeat_ms=30)
    per_iter = trials_per_round(64, max(1, s.trials_per_bucket - 1), 1)
    for bucket in sorted(s.buckets, reverse=True):
        run.log(f"TuneFarm: M={bucket}, {s.trials_per_bucket} trials")
        t0 = time.time()
        summary = tune(
            model.mod,
            target,
            storage,
            TuneConfig(trials=s.trials_per_bucket, seed=0, measure=measure),
            buckets={"M": [bucket]},
            model_name=f"qkv-M{bucket}",
        )
        curve = _tunefarm_curve(storage, TuneFarmDatabase(storage), out["tasks"][bucket], t0)
        out["jobs"][bucket] = {"summary": summary.to_dict(), "curve": curve}
        run.log(f"stock MetaSchedule tune_tir: M={bucket}, {s.trials_per_bucket} trials")
        out["stock"][bucket] = stock_tune(
            out["tasks"][bucket].mod,
            target,
            s.trials_per_bucket,
            per_iter,
            measure,
            run.tmp,
            s.stock_fast_import,
        )
    run._tuned = out
    return out


def _tunefarm_curve(storage: Any, db: Any, task: Any, t0: float) -> list[dict[str, Any]]:
    """(seconds since the tune call, latency or None) of each record of ``task``, in order."""
    from database.queries import record_timeline

    out = []
    for _, created, mean in record_timeline(storage, workload_id=db.workload_id(task.mod)):
        when = created if created.tzinfo else created.replace(tzinfo=dt.timezone.utc)
        out.append({"wall": when.timestamp() - t0, "sec": mean})
    return out


def stock_tune(
    mod: Any,
    target: Any,
    trials: int,
    per_iter: int,
    measure: Any,
    tmp: str,
    fast_import: bool = True,
) -> dict[str, Any]:
    """``ms.tune_tir`` on ``mod`` with LocalBuilder/LocalRunner, measured as TuneFarm measures;
    returns the best schedule's trace, the best-so-far curve and the wall time."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from tuner.fastimport import prepare_stock_builder
    from workers.fast_math import install as install_fast_math

    @derived_object
    class Clock(PyMeasureCallback):
        def __init__(self) -> None:
            super().__init__()
            self.events: list[dict[str, Any]] = []

        def apply(self, _sched: Any, _tid: int, cands: list, builds: list, runs: list) -> None:
            now = time.time()
            for b, r in zip(builds, runs, strict=True):
                secs = [float(x) for x in r.run_secs] if r.run_secs else []
                ok = b.error_msg is None and r.error_msg is None and secs
                self.events.append({"wall": now, "sec": sum(secs) / len(secs) if ok else None})

    clock = Clock()
    # MetaSchedule's console handler takes this logger's level (its log file keeps everything)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    runner = ms.runner.LocalRunner(
        evaluator_config=ms.runner.EvaluatorConfig(
            number=measure.number, repeat=measure.repeat, min_repeat_ms=measure.min_repeat_ms
        )
    )
    work_dir = tempfile.mkdtemp(prefix="stock-ms-", dir=tmp)
    t0 = time.time()
    database = ms.tune_tir(
        mod,
        target,
        work_dir,
        max_trials_global=trials,
        num_trials_per_iter=per_iter,
        builder=ms.builder.LocalBuilder(
            timeout_sec=STOCK_BUILD_TIMEOUT_S,
            initializer=prepare_stock_builder if fast_import else install_fast_math,
        ),
        runner=runner,
        database="json",
        measure_callbacks=[
            ms.measure_callback.AddToDatabase(),
            ms.measure_callback.RemoveBuildArtifact(),
            ms.measure_callback.UpdateCostModel(),
            clock,
        ],
        seed=0,
    )
    wall = time.time() - t0
    sch = database.query_schedule(mod, target, workload_name="main")
    curve = [{"wall": e["wall"] - t0, "sec": e["sec"]} for e in clock.events]
    return {"wall_sec": wall, "trials": len(curve), "curve": curve, "schedule": sch}


# --------------------------------------------------------------------------- kernels
def _build_kernel(func: Any, target: Any) -> Any:
    import tvm

    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    return tvm.driver.build(mod, target=target)


def _tunefarm_static(db: Any, task: Any, target: Any) -> Any:
    """TuneFarm's best static kernel of ``task`` (its trace applied), or None."""
    import tvm

    found = db.best(task.mod, target)
    if found is None:
        return None
    sch = tvm.s_tir.Schedule(task.mod)
    found.record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod["main"]


Timers = dict[str, Callable[[], float]]


def sweep(
    run: Run,
    model: Any,
    var: str,
    values: tuple[int, ...],
    db: Any,
    flops_of: Callable[[int], float],
    extra: Callable[[int, list[np.ndarray]], tuple[dict[str, Any], Timers]] | None = None,
) -> list[dict[str, Any]]:
    """Time untuned, tuned (when ``db``), ``extra``'s kernels and numpy at each value of
    ``var`` on the same inputs, one repeat of each in turn (numpy in the baseline process)."""
    import tvm
    from tvm import relax

    from tuner.bench.timing import compare_outputs, random_inputs
    from tuner.compile import compile
    from tuner.frontends.reference import flat_outputs

    s, target, dev = run.settings, run.target, tvm.cpu()
    assert run.baseline is not None
    untuned_ex, _ = compile(model.mod, target, None)
    vms = {"untuned": relax.VirtualMachine(untuned_ex, dev)}
    if db is not None:
        tuned_ex, _ = compile(model.mod, target, db)
        vms["tuned"] = relax.VirtualMachine(tuned_ex, dev)
    ref = _reference(model)
    key = f"{Path(ref['path']).stem}-numpy"
    run.baseline.load(key, ref)
    peak = run.results.get("peak", {}).get("gflops")
    rows = []
    for value in values:
        args = random_inputs(model.mod["main"], {var: value}, np.random.default_rng(0))
        targs = [tvm.runtime.tensor(a, device=dev) for a in args]
        expected = flat_outputs([np.asarray(model.numpy_reference(*args))])
        row: dict[str, Any] = {var: value, "flops": flops_of(value)}
        timers: Timers = {}
        for name, vm in vms.items():
            _, agree = compare_outputs(flat_outputs(vm["main"](*targs)), expected)
            row[f"{name}_agree"] = agree
            timers[name] = tvm_timer(vm, "main", dev, targs, s)
        if extra is not None:
            info, more = extra(value, args)
            row.update(info)
            timers.update(more)
        run.baseline.set_args(key, args)
        timers["numpy"] = lambda: run.baseline.sample(key, s.min_repeat_ms)  # type: ignore[union-attr]
        row.update(interleave(timers, s.repeats))
        for name in ("untuned", "tuned", "numpy", "stock", "static"):
            if isinstance(row.get(name), dict):
                gf = row["flops"] / row[name]["median"] / 1e9
                row[name]["gflops"] = gf
                row[name]["peak_fraction"] = gf / peak if peak else None
                row[name]["invalid"] = invalid_reason(row[name], peak)
        rows.append(row)
        run.log(
            f"  {var}={value}: "
            + ", ".join(
                f"{k} {row[k]['median'] * 1e3:.3f} ms"
                + (f" (invalid: {row[k]['invalid']})" if row[k]["invalid"] else "")
                for k in ("untuned", "tuned", "numpy", "stock")
                if isinstance(row.get(k), dict)
            )
        )
    return rows


def _reference(model: Any) -> dict[str, Any]:
    """The baseline process's copy of ``model.numpy_reference`` (its file, tvm parts skipped)."""
    import inspect

    path = inspect.getsourcefile(model.numpy_reference)
    if path is None:
        raise ValueError("the model's numpy_reference has no source file")
    return {"kind": "file", "path": str(Path(path).resolve()), "name": "numpy_reference"}


def part_kernels(run: Run) -> dict[str, Any]:
    import tvm

    from database import TuneFarmDatabase

    s, target = run.settings, run.target
    tuned = tune_qkv(run)
    db = TuneFarmDatabase(tuned["storage"]) if s.trials_per_bucket else None
    dev = tvm.cpu()
    stock_libs, static_libs = {}, {}
    for bucket, task in tuned["tasks"].items():
        if bucket in tuned["stock"] and tuned["stock"][bucket]["schedule"] is not None:
            stock_libs[bucket] = _build_kernel(
                tuned["stock"][bucket]["schedule"].mod["main"], target
            )
        if db is not None:
            func = _tunefarm_static(db, task, target)
            if func is not None:
                static_libs[bucket] = _build_kernel(func, target)

    def extra(m: int, args: list[np.ndarray]) -> tuple[dict[str, Any], Timers]:
        out: dict[str, Any] = {"on_bucket": m in s.buckets}
        timers: Timers = {}
        targs = [tvm.runtime.tensor(a, device=dev) for a in args]
        targs.append(tvm.runtime.empty((m, N), "float32", dev))
        for key, libs in (("stock", stock_libs), ("static", static_libs)):
            if m in libs:
                libs[m]["main"](*targs)
                ok = np.allclose(targs[-1].numpy(), args[0] @ args[1], rtol=1e-3, atol=1e-3)
                out[f"{key}_agree"] = bool(ok)
                timers[key] = tvm_timer(libs[m], "main", dev, targs, s)
        return out, timers

    run.log("kernels: sweeping M")
    rows = sweep(run, tuned["model"], "M", s.values, db, lambda m: 2.0 * m * K * N, extra)
    return {
        "model": QKV,
        "buckets": list(s.buckets),
        "trials_per_bucket": s.trials_per_bucket,
        "rows": rows,
    }


def part_examples(run: Run) -> dict[str, Any]:
    from benchmarks.symbolic import tune_buckets
    from database import Storage, TuneFarmDatabase
    from tuner.fastimport import preload_tensor_intrin
    from tuner.model import load_model
    from tuner.symbolic.buckets import bucket_tasks

    s, target = run.settings, run.target
    model = load_model(ROOT / MLP)
    buckets = {"b": list(s.example_buckets)}
    n_tasks = len(bucket_tasks(model.mod, target, buckets))
    budget = s.example_trials_per_task * n_tasks
    db, summary = None, None
    if budget:
        preload_tensor_intrin()
        storage = Storage(f"sqlite:///{run.tmp}/examples.db")
        run.log(f"examples: tuning {MLP} at b={s.example_buckets}, {budget} trials")
        summary = tune_buckets(model, target, storage, buckets, budget, "mlp_dynamic", None)
        db = TuneFarmDatabase(storage)
    flops = lambda b: 2.0 * b * 256 * 512 * 2  # noqa: E731  (two matmuls)
    rows = sweep(run, model, "b", s.example_values, db, flops)
    for row in rows:
        row["on_bucket"] = row["b"] in s.example_buckets
    return {
        "model": MLP,
        "buckets": list(s.example_buckets),
        "tasks": n_tasks,
        "trials": budget,
        "tune_wall_sec": summary.wall_sec if summary else None,
        "rows": rows,
    }


# --------------------------------------------------------------------------- efficiency
def best_so_far(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Running minimum of the valid latencies, one point per trial."""
    best, out = None, []
    for i, point in enumerate(curve, 1):
        if point["sec"] is not None and (best is None or point["sec"] < best):
            best = point["sec"]
        out.append({"trial": i, "wall": point["wall"], "best": best})
    return out


def to_target(curve: list[dict[str, Any]], target_sec: float) -> dict[str, Any] | None:
    """The first trial (and its wall time) whose best-so-far is within ``target_sec``."""
    for p in curve:
        if p["best"] is not None and p["best"] <= target_sec:
            return {"trial": p["trial"], "wall": p["wall"]}
    return None


def part_efficiency(run: Run) -> dict[str, Any]:
    s = run.settings
    tuned = tune_qkv(run)
    if not tuned["jobs"]:
        return {"skipped": "no tuning budget (trials_per_bucket = 0)"}
    bucket = max(tuned["jobs"])
    flops = 2.0 * bucket * K * N
    curves = {
        "TuneFarm": best_so_far(tuned["jobs"][bucket]["curve"]),
        "MetaSchedule": best_so_far(tuned["stock"][bucket]["curve"]),
    }
    finals = {k: c[-1]["best"] for k, c in curves.items() if c and c[-1]["best"]}
    better = min(finals.values()) if finals else None
    walls = {
        "TuneFarm": tuned["jobs"][bucket]["summary"]["wall_sec"],
        "MetaSchedule": tuned["stock"][bucket]["wall_sec"],
    }
    out: dict[str, Any] = {"task": f"QKV matmul M={bucket}", "trials": s.trials_per_bucket}
    for name, curve in curves.items():
        reach = to_target(curve, better / 0.9) if better else None
        out[name] = {
            "curve": curve,
            "final_sec": finals.get(name),
            "final_gflops": flops / finals[name] / 1e9 if name in finals else None,
            "trials": len(curve),
            "wall_sec": walls[name],
            "wall_per_trial": walls[name] / len(curve) if curve else None,
            "to_90pct": reach,
        }
    if len(finals) == 2:
        out["final_ratio"] = finals["MetaSchedule"] / finals["TuneFarm"]
    return out


# --------------------------------------------------------------------------- overhead
def part_overhead(run: Run) -> dict[str, Any]:
    tuned = tune_qkv(run)
    if not tuned["jobs"]:
        return {"skipped": "no tuning budget (trials_per_bucket = 0)"}
    jobs = []
    for bucket, job in sorted(tuned["jobs"].items()):
        summ = job["summary"]
        phases = summ.get("phases") or {}
        measured = max(1, len(job["curve"]))
        work = summ["wall_sec"] - phases.get("startup", 0.0)
        jobs.append(
            {
                "job": f"QKV M={bucket}",
                "trials": len(job["curve"]),
                "wall_sec": summ["wall_sec"],
                "candidates_per_sec": measured / work if work > 0 else None,
                "phases": phases,
                "db_share": summ["db_sec"] / summ["wall_sec"],
            }
        )
    stock = [
        {
            "job": f"stock M={b}",
            "trials": st["trials"],
            "wall_sec": st["wall_sec"],
            "candidates_per_sec": st["trials"] / st["wall_sec"] if st["wall_sec"] else None,
        }
        for b, st in sorted(tuned["stock"].items())
    ]
    dispatch = []
    kernels = run.results.get("kernels", {})
    for row in kernels.get("rows", []):
        if isinstance(row.get("static"), dict) and isinstance(row.get("tuned"), dict):
            dispatch.append(
                {
                    "M": row["M"],
                    "module_sec": row["tuned"]["median"],
                    "static_sec": row["static"]["median"],
                    "overhead": row["tuned"]["median"] / row["static"]["median"] - 1.0,
                }
            )
    return {"tunefarm_jobs": jobs, "stock_jobs": stock, "dispatch": dispatch}


# --------------------------------------------------------------------------- others
def latest_result(pattern: str) -> dict[str, Any] | None:
    files = sorted(glob.glob(str(RESULTS / pattern)), key=lambda f: (os.path.getmtime(f), f))
    if not files:
        return None
    data = json.loads(Path(files[-1]).read_text())
    return {"file": str(Path(files[-1]).relative_to(ROOT)), "data": data}


def part_database(run: Run) -> dict[str, Any]:
    from benchmarks import database

    out_file = Path(run.tmp) / "database.json"
    sizes = [str(n) for n in run.settings.db_sizes]
    with contextlib.redirect_stdout(io.StringIO()):
        database.main(["--sizes", *sizes, "--no-job", "--out", str(out_file)])
    return {
        "suite": json.loads(out_file.read_text()),
        "latest_full": latest_result("*-database.json"),
    }


def part_plugin(run: Run, module: str, pattern: str) -> dict[str, Any]:
    """A part that another module provides: ``suite_part(quick=...)``, else its latest file."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        mod = None
    if mod is not None and hasattr(mod, "suite_part"):
        return {"source": module, "data": mod.suite_part(quick=run.settings.quick)}
    found = latest_result(pattern)
    if found is not None:
        return {"source": found["file"], "data": found["data"]}
    return {"skipped": f"not run in this suite ({module} is not available yet)"}


def part_gpu(run: Run) -> dict[str, Any]:
    from benchmarks import gpu

    reason = gpu.unavailable()
    if reason:
        return {"skipped": f"no GPU on this machine ({reason})"}
    return gpu.run(run.settings.values, run.settings.repeats, run.log)


# --------------------------------------------------------------------------- run
def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("tvm", "numpy", "ray", "xgboost", "sqlalchemy", "torch", "matplotlib"):
        try:
            from importlib.metadata import version

            dist = {"tvm": "apache-tvm", "xgboost": "xgboost-cpu"}.get(name, name)
            out[name] = version(dist)
        except Exception:
            continue
    return out


def fingerprint() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        **machine_header(),
        "threads": {k: os.environ.get(k) for k in ("TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        "loadavg_start": list(load) if load else None,
    }


def noisy_figures(results: dict[str, Any]) -> list[str]:
    """Every timed figure whose spread over repeats exceeds NOISY_SPREAD."""
    return [
        f"{path} ({fig['spread']:.0%})"
        for path, fig in timed_figures(results)
        if fig["spread"] > NOISY_SPREAD
    ]


RUNNERS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "kernels": part_kernels,
    "examples": part_examples,
    "efficiency": part_efficiency,
    "overhead": part_overhead,
    "models": lambda run: part_plugin(run, "benchmarks.models", "*-models.json"),
    "database": part_database,
    "cost-model": lambda run: part_plugin(run, "benchmarks.cost_model", "*cost*model*.json"),
    "throughput": lambda run: part_plugin(run, "benchmarks.throughput", "*throughput*.json"),
    "gpu": part_gpu,
}


def run_suite(
    parts: list[str], settings: Settings, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run ``parts`` in order; a part that fails is recorded as an error, not fatal."""
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="tunefarm-suite-") as tmp,
        BaselineProcess(baseline_threads()) as baseline,
    ):
        run = Run(settings, tmp, log, baseline=baseline)
        res = run.results
        res.update(
            {
                "suite": "tunefarm",
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "machine": fingerprint(),
                "versions": versions(),
                "settings": asdict(settings),
                "parts": list(parts),
            }
        )
        log(
            f"baseline process {baseline.info['pid']} (no tvm), {baseline.threads} threads; "
            "calibrating peak with a large OpenBLAS SGEMM there"
        )
        res["peak"] = calibrate_peak(settings, baseline)
        log(f"  peak {res['peak']['gflops']:.1f} GFLOPS (SGEMM {settings.peak_n}^3)")
        res["target"] = str(run.target)
        for part in [p for p in PARTS if p in parts]:
            log(f"part {part}")
            t0 = time.perf_counter()
            try:
                res[part] = RUNNERS[part](run)
            except Exception as err:  # one broken part must not lose the others' figures
                res[part] = {"error": f"{type(err).__name__}: {err}"[:2000]}
                log(f"  part {part} failed: {res[part]['error'][:300]}")
            res.setdefault("part_sec", {})[part] = time.perf_counter() - t0
        if run._tuned is not None and "storage" in run._tuned:
            run._tuned["storage"].dispose()
        res["peak_after"] = calibrate_peak(settings, baseline)
        res["baseline"] = baseline.summary()
    drift = abs(res["peak_after"]["gflops"] / res["peak"]["gflops"] - 1)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    res["machine"]["loadavg_end"] = list(load) if load else None
    res["noisy"] = noisy_figures({k: res.get(k) for k in ("peak", "peak_after", *PARTS)})
    res["peak_drift"] = drift
    res["noisy_run"] = bool(res["noisy"]) or drift > NOISY_SPREAD
    peak, _ = measured_peak([res.get("peak"), res.get("peak_after")])
    res["invalid"] = invalid_figures({k: res.get(k) for k in ("peak", "peak_after", *PARTS)}, peak)
    res["wall_sec"] = time.perf_counter() - start
    return _jsonable(res)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items() if k != "schedule"}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, float) and obj != obj:
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks suite", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke run)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--trials", type=int, default=None, help="trials per bucket")
    parser.add_argument("--example-trials", type=int, default=None, help="per example task")
    parser.add_argument(
        "--stock-as-shipped",
        action="store_true",
        help="stock builders re-import the tensor intrinsics every round (slow)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.for_quick_run() if args.quick else Settings()
    if args.trials is not None:
        settings = replace(settings, trials_per_bucket=args.trials)
    if args.stock_as_shipped:
        settings = replace(settings, stock_fast_import=False)
    if args.example_trials is not None:
        settings = replace(settings, example_trials_per_task=args.example_trials)
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    # the baseline process gets the same count (benchmarks.baseline.baseline_threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["TVM_NUM_THREADS"])
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    results = run_suite(args.parts, settings, log)
    out = args.out or results_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    log(f"wrote {out}")
    if not args.no_report:
        from benchmarks.report import write_report

        path = write_report(results, args.report, results_file=out)
        log(f"wrote {path}")
    if results["invalid"]:
        log(
            f"INVALID: {len(results['invalid'])} figure(s) spread by more than "
            f"{INVALID_SPREAD:.0%} or ran above the measured peak; reported as invalid"
        )
    if results["noisy_run"]:
        log(f"NOISY RUN: {len(results['noisy'])} figure(s) vary by more than {NOISY_SPREAD:.0%}")
    failed = [p for p in args.parts if isinstance(results.get(p), dict) and "error" in results[p]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
