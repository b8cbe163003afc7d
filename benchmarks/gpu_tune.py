"""A real TuneFarm tune for CUDA on this machine's GPU, then the untuned and tuned builds timed
side by side (one process, same inputs) and checked against each other.

    python -m benchmarks.gpu_tune examples/mlp.py [--trials 64] [--seed 0] [--json OUT]

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


def run(model: str, trials: int, seed: int, db_url: str) -> dict[str, Any]:
    """Tune ``model`` for the local GPU into ``db_url``; time untuned and tuned builds."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from benchmarks.common import stat
    from database import Storage
    from tuner.bench import random_inputs
    from tuner.compile import compile as tf_compile
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.targets import resolve_target
    from workers.fingerprint import device_fingerprint
    from workers.gpu import cuda_unusable_reason

    reason = cuda_unusable_reason()
    if reason:
        raise SystemExit(f"error: {reason}")
    mod = load_model(model).mod
    target = resolve_target("cuda")
    start = time.perf_counter()
    summary = tune(mod, target, Storage(db_url), TuneConfig(trials=trials, seed=seed))
    result: dict[str, Any] = {
        "device": device_fingerprint("cuda"),
        "model": model,
        "trials": trials,
        "seed": seed,
        "tune_wall_s": time.perf_counter() - start,
        "job": summary.to_dict(),
    }
    dev = tvm.cuda(0)
    rng = np.random.default_rng(seed)
    args = [tvm.runtime.tensor(a, device=dev) for a in random_inputs(mod["main"], {}, rng)]
    outputs = {}
    for name, db in (("untuned", None), ("tuned", db_url)):
        ex, _ = tf_compile(mod, target, db)
        vm = VirtualMachine(ex, dev)
        outputs[name] = vm["main"](*args).numpy()
        timer = vm.time_evaluator("main", dev, number=20, repeat=7, min_repeat_ms=20)
        result[name] = stat([float(s) for s in timer(*args).results])
        print(f"{name}: {result[name]['median'] * 1e6:.1f} us", flush=True)
    result["agree"] = bool(np.allclose(outputs["untuned"], outputs["tuned"], rtol=1e-3, atol=1e-3))
    result["speedup"] = result["untuned"]["median"] / result["tuned"]["median"]
    print(f"tuned/untuned speedup {result['speedup']:.2f}x, outputs agree: {result['agree']}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_tune")
    parser.add_argument("model")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tunefarm-gpu-") as tmp:
        result = run(args.model, args.trials, args.seed, f"sqlite:///{tmp}/gpu.db")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
