"""Benchmark a model: untuned default build vs tuned build vs a numpy reference."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from database import TuneFarmDatabase
from tuner.compile import compile
from tuner.errors import TuneFarmError
from tuner.model import Model

RTOL, ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class BenchResult:
    """Latencies (median seconds), ratios and numerics of one benchmark run."""

    untuned_sec: float
    tuned_sec: float
    numpy_sec: float | None
    max_abs_err: float
    reference: str  # "numpy" or "untuned"
    agree: bool
    tuned_share: float
    untuned_kernels: list[str]
    shape: dict[str, int]

    @property
    def speedup(self) -> float:
        return self.untuned_sec / self.tuned_sec

    @property
    def vs_numpy(self) -> float | None:
        return self.numpy_sec / self.tuned_sec if self.numpy_sec else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["speedup"], out["vs_numpy"] = self.speedup, self.vs_numpy
        return out


def random_inputs(
    func: relax.Function, values: dict[str, int], rng: np.random.Generator
) -> list[np.ndarray]:
    """Random inputs for every tensor parameter of ``func``; symbolic dims from ``values``."""
    arrays = []
    for param in func.params:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise TuneFarmError(f"parameter {param.name_hint} is not a tensor of known rank")
        shape = []
        for dim in ty.shape.values:
            if isinstance(dim, tvm.tirx.IntImm):
                shape.append(int(dim))
            else:
                dim_vars = tvm.tirx.analysis.undefined_vars(dim)
                missing = [v.name for v in dim_vars if v.name not in values]
                if missing:
                    raise TuneFarmError(
                        f"symbolic dim {', '.join(missing)} needs a value: pass --shape "
                        f"{missing[0]}=N"
                    )
                env = {v: tvm.tirx.IntImm(v.dtype, values[v.name]) for v in dim_vars}
                shape.append(
                    int(tvm.arith.Analyzer().simplify(tvm.tirx.stmt_functor.substitute(dim, env)))
                )
        dtype = str(ty.dtype)
        if dtype.startswith("float"):
            arrays.append((rng.standard_normal(shape) * 0.5).astype(dtype))
        else:
            arrays.append(rng.integers(0, 8, size=shape).astype(dtype))
    return arrays


def _time_vm(
    ex: relax.VMExecutable, args: list[np.ndarray], repeat: int, min_repeat_ms: int
) -> tuple[np.ndarray, float]:
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    tvm_args = [tvm.runtime.tensor(a, device=dev) for a in args]
    out = vm["main"](*tvm_args)
    timer = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return _to_numpy(out), statistics.median(timer(*tvm_args).results)


def _to_numpy(out: Any) -> np.ndarray:
    if hasattr(out, "numpy"):
        return out.numpy()
    return _to_numpy(out[0])


def _time_numpy(fn: Callable[..., Any], args: list[np.ndarray], repeat: int) -> float:
    fn(*args)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        number = 0
        while True:
            fn(*args)
            number += 1
            if time.perf_counter() - start > 0.02:
                break
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def bench(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shape: dict[str, int] | None = None,
    *,
    repeat: int = 5,
    min_repeat_ms: int = 50,
) -> BenchResult:
    """Build untuned and tuned, run both (and numpy) on the same random inputs."""
    if target.kind.name != "llvm":
        raise TuneFarmError("tunefarm bench runs locally on the CPU; use an llvm target")
    values = dict(shape or {})
    for name, buckets in model.shape_vars.items():
        values.setdefault(name, buckets[0])
    args = random_inputs(model.mod["main"], values, np.random.default_rng(0))
    untuned_ex, _ = compile(model.mod, target, None)
    tuned_ex, report = compile(model.mod, target, db)
    ref_untuned, untuned_sec = _time_vm(untuned_ex, args, repeat, min_repeat_ms)
    out, tuned_sec = _time_vm(tuned_ex, args, repeat, min_repeat_ms)
    numpy_sec = None
    reference, expected = "untuned", ref_untuned
    if model.numpy_reference is not None:
        expected = np.asarray(model.numpy_reference(*args))
        numpy_sec = _time_numpy(model.numpy_reference, args, repeat)
        reference = "numpy"
    if out.shape != expected.shape:
        raise TuneFarmError(f"output shape {out.shape} differs from reference {expected.shape}")
    err = np.abs(out.astype(np.float64) - expected.astype(np.float64))
    # fp32 reductions round differently in different schedules: tolerate RTOL of the
    # output's scale on every element, plus RTOL of each element's own magnitude.
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    agree = bool(np.all(err <= RTOL * max(scale, ATOL) + RTOL * np.abs(expected)))
    return BenchResult(
        untuned_sec=untuned_sec,
        tuned_sec=tuned_sec,
        numpy_sec=numpy_sec,
        max_abs_err=float(err.max()) if err.size else 0.0,
        reference=reference,
        agree=agree,
        tuned_share=report.tuned_share,
        untuned_kernels=report.untuned,
        shape=values,
    )
