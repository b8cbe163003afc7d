"""The GPU benchmark split in two: build here, time on a GPU node that has only TVM's runtime.

A GPU runner node needs no TVM compiler: it loads libraries built elsewhere (nvcc runs on any
machine). ``export`` compiles ``benchmarks.gpu``'s fp32/fp16 matmuls for a CUDA arch into Relax
VM libraries; ``run`` (importing only TVM's runtime) checks each against numpy, times it with
the product's own runner function (:func:`workers.measure.measure_vm`) and, where torch sees the
GPU, times torch/cuBLAS on the same inputs side by side.

    python -m benchmarks.gpu_prebuilt export DIR --arch sm_90
    python -m benchmarks.gpu_prebuilt run DIR [--values 1,64,512,2048] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import stat

K, N = 768, 2304  # the matmul's shapes, here since benchmarks.gpu needs the compiler
DTYPES = ("float32", "float16")


def export(folder: Path, arch: str) -> list[Path]:
    """Compile both matmuls for ``arch`` with the untuned default (dlight) schedules."""
    import tvm

    from benchmarks.gpu import MODULES
    from tuner.compile import compile as tf_compile

    folder.mkdir(parents=True, exist_ok=True)
    target = tvm.target.Target({"kind": "cuda", "arch": arch, "host": {"kind": "llvm"}})
    paths = []
    for dtype in DTYPES:
        ex, _ = tf_compile(MODULES[dtype], target, None)
        path = folder / f"matmul_{dtype}.so"
        ex.export_library(str(path))
        paths.append(path)
    (folder / "build.json").write_text(json.dumps({"arch": arch, "target": str(target)}))
    return paths


def torch_timer() -> Callable[[np.ndarray, np.ndarray, int], dict[str, Any]] | None:
    """Times ``x @ w`` with torch (cuBLAS) on GPU 0 with CUDA events; None without it."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def time_torch(x: np.ndarray, w: np.ndarray, repeats: int) -> dict[str, Any]:
        tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        torch.matmul(tx, tw)
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            number = 20
            start.record()
            for _ in range(number):
                torch.matmul(tx, tw)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / number)
        return stat(samples)

    return time_torch


def _agree(lib_path: Path, dtype: str, m: int) -> bool:
    """The library's result matches numpy at ``M = m``."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    dev = tvm.cuda(0)
    vm = VirtualMachine(tvm.runtime.load_module(str(lib_path)), dev)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (m, K)).astype(dtype)
    w = rng.uniform(-1, 1, (K, N)).astype(dtype)
    out = vm["main"](*(tvm.runtime.tensor(a, device=dev) for a in (x, w))).numpy()
    ref = x.astype(np.float32) @ w.astype(np.float32)
    tol = 1e-2 if dtype == "float16" else 1e-3
    return bool(np.allclose(out.astype(np.float32), ref, rtol=tol, atol=tol * np.abs(ref).max()))


def run(folder: Path, values: list[int], repeats: int = 7) -> dict[str, Any]:
    """Time every library at every M on GPU 0 (TVM runtime only), next to torch."""
    import tvm

    from workers.config import MeasureConfig
    from workers.fingerprint import device_fingerprint
    from workers.gpu import cuda_unusable_reason
    from workers.measure import measure_vm

    reason = cuda_unusable_reason()
    if reason:
        raise SystemExit(f"error: {reason}")
    config = MeasureConfig(number=10, repeat=repeats, min_repeat_ms=20)
    time_torch = torch_timer()
    rows = []
    for dtype in DTYPES:
        lib = folder / f"matmul_{dtype}.so"
        artifact = lib.read_bytes()
        for m in values:
            args = [["TENSOR", dtype, [m, K]], ["TENSOR", dtype, [K, N]]]
            res = measure_vm(artifact, args, "cuda", config)
            if not res.ok:
                raise SystemExit(f"error: {dtype} M={m}: {res.error_msg}")
            row: dict[str, Any] = {
                "dtype": dtype,
                "M": m,
                "flops": 2.0 * m * K * N,
                "untuned": stat(list(res.run_secs or ())),
                "untuned_agree": _agree(lib, dtype, m),
            }
            if time_torch is not None:
                rng = np.random.default_rng(0)
                x = rng.uniform(-1, 1, (m, K)).astype(dtype)
                w = rng.uniform(-1, 1, (K, N)).astype(dtype)
                row["torch"] = time_torch(x, w, repeats)
            for key in ("untuned", "torch"):
                if key in row:
                    row[key]["tflops"] = row["flops"] / row[key]["median"] / 1e12
            if "torch" in row:
                row["torch_over_untuned"] = row["torch"]["median"] / row["untuned"]["median"]
            rows.append(row)
            print(
                f"{dtype} M={m}: default {row['untuned']['median'] * 1e6:.1f} us"
                + (f", torch {row['torch']['median'] * 1e6:.1f} us" if "torch" in row else "")
                + ("" if row["untuned_agree"] else "  RESULT DISAGREES WITH NUMPY"),
                flush=True,
            )
    return {
        "device": device_fingerprint("cuda"),
        "tvm_runtime_only": bool(getattr(tvm, "_RUNTIME_ONLY", False)),
        "build": json.loads((folder / "build.json").read_text()),
        "torch": time_torch is not None,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_prebuilt")
    sub = parser.add_subparsers(dest="cmd", required=True)
    exp = sub.add_parser("export", help="compile the matmuls for a CUDA arch (no GPU needed)")
    exp.add_argument("folder", type=Path)
    exp.add_argument("--arch", required=True, help="sm_XY of the GPU that will time them")
    run_p = sub.add_parser("run", help="time exported matmuls on GPU 0 (TVM runtime only)")
    run_p.add_argument("folder", type=Path)
    run_p.add_argument("--values", default="1,16,64,256,1024,4096")
    run_p.add_argument("--repeats", type=int, default=7)
    run_p.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.cmd == "export":
        for path in export(args.folder, args.arch):
            print(path)
        return 0
    result = run(args.folder, [int(v) for v in args.values.split(",")], args.repeats)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
