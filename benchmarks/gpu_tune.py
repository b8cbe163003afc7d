"""A real TuneFarm tune for CUDA on this machine's GPU, then the untuned and tuned builds timed
side by side (one process, same inputs) and checked against each other.

    python -m benchmarks.gpu_tune examples/mlp.py [--trials 64] [--seed 0] [--json OUT]
    python -m benchmarks.gpu_tune examples/mlp_dynamic.py --shape b=1,8,32 --at b=1,5,8,20,32

A model with symbolic dims is tuned at the ``--shape`` buckets (default: TuneFarm's choice) and
timed at every ``--at`` value (default: the buckets), where one build serves them all.

The untuned build is what ``tunefarm build`` gives without records: dlight's default GPU
schedules. Needs a GPU whose TVM can time CUDA kernels (``python -m workers.gpu``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def run(
    model: str,
    trials: int,
    seed: int,
    db_url: str,
    shape: list[str] | None = None,
    at: list[str] | None = None,
) -> dict[str, Any]:
    """Tune ``model`` for the local GPU into ``db_url``; time untuned and tuned builds at each
    value of its symbolic dims (``at``; a static model: once)."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from benchmarks.common import stat
    from database import Storage
    from tuner.bench.timing import random_inputs
    from tuner.compile import compile as tf_compile
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.symbolic.buckets import choose_buckets, parse_shape_options
    from tuner.targets import resolve_target
    from workers.fingerprint import device_fingerprint
    from workers.gpu import cuda_unusable_reason

    reason = cuda_unusable_reason()
    if reason:
        raise SystemExit(f"error: {reason}")
    loaded = load_model(model)
    mod = loaded.mod
    buckets = choose_buckets(mod, parse_shape_options(shape or []), loaded.shape_vars)
    target = resolve_target("cuda")
    start = time.perf_counter()
    summary = tune(
        mod, target, Storage(db_url), TuneConfig(trials=trials, seed=seed), buckets=buckets
    )
    result: dict[str, Any] = {
        "device": device_fingerprint("cuda"),
        "model": model,
        "trials": trials,
        "seed": seed,
        "buckets": buckets,
        "tune_wall_s": time.perf_counter() - start,
        "job": summary.to_dict(),
    }
    dev = tvm.cuda(0)
    vms = {}
    for name, db in (("untuned", None), ("tuned", db_url)):
        ex, _ = tf_compile(mod, target, db)
        vms[name] = VirtualMachine(ex, dev)
    points = value_points(buckets, parse_shape_options(at or []))
    result["points"] = []
    for values in points:
        rng = np.random.default_rng(seed)
        arrays = random_inputs(mod["main"], values, rng)
        args = [tvm.runtime.tensor(a, device=dev) for a in arrays]
        point: dict[str, Any] = {"values": values}
        outputs = {}
        for name, vm in vms.items():
            outputs[name] = vm["main"](*args).numpy()
            timer = vm.time_evaluator("main", dev, number=20, repeat=7, min_repeat_ms=20)
            point[name] = stat([float(s) for s in timer(*args).results])
        point["agree"] = bool(
            np.allclose(outputs["untuned"], outputs["tuned"], rtol=1e-3, atol=1e-3)
        )
        point["speedup"] = point["untuned"]["median"] / point["tuned"]["median"]
        label = ", ".join(f"{k}={v}" for k, v in values.items()) or "static"
        print(
            f"{label}: untuned {point['untuned']['median'] * 1e6:.1f} us, tuned "
            f"{point['tuned']['median'] * 1e6:.1f} us, speedup {point['speedup']:.2f}x, "
            f"outputs agree: {point['agree']}",
            flush=True,
        )
        result["points"].append(point)
    result["agree"] = all(p["agree"] for p in result["points"])
    return result


def value_points(buckets: dict[str, list[int]], at: dict[str, list[int]]) -> list[dict[str, int]]:
    """The values to time at: ``at``'s where given, else each variable's buckets (one point per
    index, the variables zipped; a variable with fewer values keeps its last); a static model
    gets the single empty point."""
    chosen = {var: at.get(var) or vals for var, vals in buckets.items()}
    unknown = sorted(set(at) - set(buckets))
    if unknown:
        raise SystemExit(f"error: --at names unknown variable(s) {', '.join(unknown)}")
    if not chosen:
        return [{}]
    n = max(len(v) for v in chosen.values())
    return [{var: vals[min(i, len(vals) - 1)] for var, vals in chosen.items()} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_tune")
    parser.add_argument("model")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--shape", action="append", help="buckets, VAR=V1,V2 (as tune's)")
    parser.add_argument("--at", action="append", help="values to time at, VAR=V1,V2")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tunefarm-gpu-") as tmp:
        url = f"sqlite:///{tmp}/gpu.db"
        result = run(args.model, args.trials, args.seed, url, args.shape, args.at)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
