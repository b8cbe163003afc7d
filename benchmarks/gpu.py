"""GPU variant of the kernel part: X[M,768]·W[768,2304] in fp32 and fp16 over M on CUDA.

The untuned default build (dlight's GPU schedules, what ``tunefarm build`` gives a kernel
without a record) against torch/cuBLAS when torch sees the GPU; both timed here, same inputs.
Runs only where ``tvm.cuda(0)`` exists; :func:`unavailable` says why not otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

from benchmarks.common import stat
from benchmarks.gpu_prebuilt import K, N, torch_timer
from database.errors import error_summary


def unavailable() -> str | None:
    """None when a CUDA GPU is usable, else the reason."""
    try:
        import tvm

        return None if tvm.cuda(0).exist else "tvm.cuda(0) does not exist"
    except Exception as err:
        return error_summary(err)


@I.ir_module
class MatmulF32:
    @R.function
    def main(x: R.Tensor(("M", 768), "float32"), w: R.Tensor((768, 2304), "float32")) -> R.Tensor(
        ("M", 2304), "float32"
    ):
        R.func_attr({"tir_var_upper_bound": {"M": 4096}})
        with R.dataflow():
            y = R.matmul(x, w)
            R.output(y)
        return y


@I.ir_module
class MatmulF16:
    @R.function
    def main(x: R.Tensor(("M", 768), "float16"), w: R.Tensor((768, 2304), "float16")) -> R.Tensor(
        ("M", 2304), "float16"
    ):
        R.func_attr({"tir_var_upper_bound": {"M": 4096}})
        with R.dataflow():
            y = R.matmul(x, w)
            R.output(y)
        return y


MODULES = {"float32": MatmulF32, "float16": MatmulF16}


def run(values: tuple[int, ...], repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Default (dlight) build vs torch at each M, for fp32 and fp16."""
    import tvm
    from tvm import relax

    from tuner.compile import compile
    from tuner.targets import resolve_target
    from workers.fingerprint import device_fingerprint

    target = resolve_target("cuda")
    dev = tvm.cuda(0)
    time_torch = torch_timer()
    rows = []
    for dtype in ("float32", "float16"):
        ex, _ = compile(MODULES[dtype], target, None)
        vm = relax.VirtualMachine(ex, dev)
        for m in values:
            rng = np.random.default_rng(0)
            x = rng.standard_normal((m, K)).astype(dtype)
            w = rng.standard_normal((K, N)).astype(dtype)
            args = [tvm.runtime.tensor(a, device=dev) for a in (x, w)]
            out = vm["main"](*args).numpy().astype(np.float32)
            ref = x.astype(np.float32) @ w.astype(np.float32)
            tol = 1e-2 if dtype == "float16" else 1e-3
            agree = bool(np.allclose(out, ref, rtol=tol, atol=tol * np.abs(ref).max()))
            timer = vm.time_evaluator("main", dev, number=10, repeat=repeats, min_repeat_ms=20)
            row: dict[str, Any] = {
                "dtype": dtype,
                "M": m,
                "flops": 2.0 * m * K * N,
                "untuned": stat([float(t) for t in timer(*args).results]),
                "untuned_agree": agree,
            }
            if time_torch is not None:
                row["torch"] = time_torch(x, w, repeats)
            for key in ("untuned", "torch"):
                if key in row:
                    row[key]["tflops"] = row["flops"] / row[key]["median"] / 1e12
            rows.append(row)
            log(f"  gpu {dtype} M={m}: default {row['untuned']['median'] * 1e6:.1f} us")
    return {
        "device": device_fingerprint("cuda"),
        "target": str(target),
        "torch": time_torch is not None,
        "rows": rows,
    }
