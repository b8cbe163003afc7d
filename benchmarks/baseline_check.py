"""Shows why baselines run in :class:`benchmarks.baseline.BaselineProcess`: numpy
``x[8,768] @ w[768,2304]`` timed (a) in this process right after TVM kernel calls and (b) in the
baseline process, each interleaved repeat by repeat with the same TVM kernel, same threads.

Usage: ``python -m benchmarks.baseline_check [--rounds 15] [--min-ms 20]`` (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from benchmarks.baseline import BaselineProcess, baseline_threads, interleave, time_loop

M, K, N = 8, 768, 2304


def _parallel_matmul() -> Any:
    """X[M,K]·W[K,N] with a parallel outer loop: it wakes TVM's thread pool on every call."""
    import tvm
    from tvm import te

    from tuner.targets import resolve_target

    a = te.placeholder((M, K), name="A")
    b = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), "k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b, c]))
    blk = sch.get_sblock("C") if hasattr(sch, "get_sblock") else sch.get_block("C")
    i, j, kk = sch.get_loops(blk)
    jo, ji = sch.split(j, [None, 64])
    sch.reorder(jo, i, kk, ji)
    sch.parallel(jo)
    sch.vectorize(ji)
    return tvm.driver.build(sch.mod, target=resolve_target("llvm"))


def check(rounds: int = 15, min_ms: float = 20.0) -> dict[str, Any]:
    """Median and spread of the numpy baseline in-process vs in the baseline process."""
    import tvm

    lib, dev = _parallel_matmul(), tvm.cpu()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    targs = [tvm.runtime.tensor(x, dev), tvm.runtime.tensor(w, dev), tvm.runtime.empty((M, N))]
    evaluator = lib.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=int(min_ms))

    def tvm_sample() -> float:
        return float(evaluator(*targs).results[0])

    out: dict[str, Any] = {
        "threads": {
            k: os.environ.get(k)
            for k in ("TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")
        },
        "loadavg_start": list(os.getloadavg()),
    }
    in_process = interleave(
        {"tvm": tvm_sample, "numpy": lambda: time_loop(lambda: x @ w, min_ms)}, rounds
    )
    with BaselineProcess(baseline_threads()) as bp:
        bp.load("qkv", {"kind": "matmul"})
        bp.set_args("qkv", [x, w])
        helper = interleave({"tvm": tvm_sample, "numpy": lambda: bp.sample("qkv", min_ms)}, rounds)
        time.sleep(1.0)  # TVM's pool idle: numpy alone, for reference
        alone = bp.time("qkv", rounds, min_ms)
        out["baseline_process"] = bp.summary()
    out["a_in_process_after_tvm"] = in_process
    out["b_baseline_process_interleaved"] = helper
    out["numpy_alone_in_baseline_process"] = alone
    out["loadavg_end"] = list(os.getloadavg())
    return out


def _fmt(t: dict[str, Any]) -> str:
    return f"median {t['median'] * 1e3:.3f} ms ± {t['spread']:.0%}, min {t['min'] * 1e3:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    prog = "python -m benchmarks.baseline_check"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--min-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["TVM_NUM_THREADS"])
    res = check(args.rounds, args.min_ms)
    for key in ("a_in_process_after_tvm", "b_baseline_process_interleaved"):
        t = res[key]["numpy"]
        print(f"{key}: numpy {_fmt(t)}", file=sys.stderr)
    print(f"numpy alone: {_fmt(res['numpy_alone_in_baseline_process'])}", file=sys.stderr)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
