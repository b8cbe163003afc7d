"""Benchmark a model: untuned default build vs tuned build vs a reference implementation.

The reference is the model's own (``Model.reference``): numpy for TVMScript files that define
``numpy_reference``, PyTorch for ``.pt2`` exported programs. Without one (ONNX, JSON) the
untuned TVM build is the numerical reference.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from database import TuneFarmDatabase
from tuner.compile import BuildReport, compile
from tuner.errors import TuneFarmError
from tuner.model import Model

RTOL, ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class BenchResult:
    """Latencies (median seconds), ratios and numerics of one benchmark run at one shape."""

    untuned_sec: float
    tuned_sec: float
    numpy_sec: float | None  # the reference's time when the reference is numpy
    max_abs_err: float
    reference: str  # "numpy", "pytorch" or "untuned"
    agree: bool
    tuned_share: float
    untuned_kernels: list[str]
    shape: dict[str, int]
    kernels: dict[str, str]  # symbolic kernel -> the variant that ran ("b8", "generic")
    reference_sec: float | None = None  # the reference implementation's time (numpy, pytorch)

    @property
    def speedup(self) -> float:
        return self.untuned_sec / self.tuned_sec

    @property
    def slower(self) -> bool:
        """The tuned build ran slower than the untuned default at this shape (a defect: the
        dispatch rule should have picked the generic kernel)."""
        return self.tuned_sec > self.untuned_sec

    @property
    def speedup_label(self) -> str:
        """``speedup`` for a table, marked where the tuned build is the slower one."""
        return f"{self.speedup:.2f}x" + (" SLOWER" if self.slower else "")

    @property
    def vs_numpy(self) -> float | None:
        return self.numpy_sec / self.tuned_sec if self.numpy_sec else None

    @property
    def vs_reference(self) -> float | None:
        """Reference time / tuned time (> 1: the tuned build is faster)."""
        return self.reference_sec / self.tuned_sec if self.reference_sec else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["speedup"], out["vs_numpy"] = self.speedup, self.vs_numpy
        out["vs_reference"] = self.vs_reference
        out["slower_than_untuned"] = self.slower
        return out


def slower_shapes(results: list[BenchResult]) -> list[str]:
    """The shapes (``s=1``, ``static``) at which the tuned build ran slower than untuned."""
    return [
        ",".join(f"{k}={v}" for k, v in r.shape.items()) or "static" for r in results if r.slower
    ]


def slower_note(results: list[BenchResult]) -> str | None:
    """One line naming the shapes where tuned < untuned, or None when there are none."""
    shapes = slower_shapes(results)
    if not shapes:
        return None
    worst = min(results, key=lambda r: r.speedup)
    return (
        f"tuned build SLOWER than the untuned default at {len(shapes)} shape(s): "
        f"{', '.join(shapes)} (worst {worst.speedup:.2f}x)"
    )


def sweep_values(buckets: list[int], bound: int | None = None) -> list[int]:
    """The buckets plus off-bucket values: between neighbours, and above the largest (at most
    ``bound``, the variable's ``tir_var_upper_bound``)."""
    out = set(buckets)
    for lo, hi in itertools.pairwise(buckets):
        if hi - lo > 1:
            out.add((lo + hi) // 2 + 1)
    above = buckets[-1] * 2 + 1 if bound is None else min(buckets[-1] * 2 + 1, bound)
    if above > buckets[-1]:
        out.add(above)
    return sorted(out)


_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b,
    "FloorMod": lambda a, b: a % b,
    "Min": min,
    "Max": max,
}


def eval_dim(expr: Any, values: dict[str, int]) -> int:
    """The integer value of a shape expression given values of its symbolic variables."""
    if isinstance(expr, tvm.tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tvm.tirx.Var):
        return int(values[expr.name])
    op = _BINARY.get(type(expr).__name__)
    if op is None:
        raise TuneFarmError(f"cannot evaluate the shape expression {expr}")
    return int(op(eval_dim(expr.a, values), eval_dim(expr.b, values)))


def random_inputs(
    func: relax.Function,
    values: dict[str, int],
    rng: np.random.Generator,
    count: int | None = None,
) -> list[np.ndarray]:
    """Random inputs for the first ``count`` (default: every) tensor parameter of ``func``;
    symbolic dims from ``values``."""
    arrays = []
    for param in list(func.params)[:count]:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise TuneFarmError(f"parameter {param.name} is not a tensor of known rank")
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
                shape.append(eval_dim(dim, values))
        dtype = str(ty.dtype)
        if dtype.startswith("float"):
            arrays.append((rng.standard_normal(shape) * 0.5).astype(dtype))
        else:
            arrays.append(rng.integers(0, 8, size=shape).astype(dtype))
    return arrays


class _VM:
    """A Relax VM that also records which kernels each call ran."""

    def __init__(self, ex: relax.VMExecutable) -> None:
        self.dev = tvm.cpu()
        self.vm = relax.VirtualMachine(ex, self.dev)
        self.called: list[str] = []
        self.vm.set_instrument(self._instrument)

    def _instrument(self, _func: Any, name: Any, before: bool, *_rest: Any) -> int:
        if before:
            self.called.append(str(name))
        return 0

    def run(self, args: list[np.ndarray], repeat: int, min_repeat_ms: int) -> tuple:
        tvm_args = [tvm.runtime.tensor(a, device=self.dev) for a in args]
        self.called.clear()
        out = _flatten(self.vm["main"](*tvm_args))
        called = list(self.called)
        self.vm.set_instrument(None)  # time without the instrument's overhead
        timer = self.vm.time_evaluator(
            "main", self.dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms
        )
        sec = statistics.median(timer(*tvm_args).results)
        self.vm.set_instrument(self._instrument)
        return out, sec, called


def _flatten(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, np.ndarray):
        return [out]
    return [a for item in out for a in _flatten(item)]


def _time_call(fn: Callable[..., Any], args: list[np.ndarray], repeat: int) -> float:
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


def _compare(outs: list[np.ndarray], expected: list[np.ndarray]) -> tuple[float, bool]:
    if [o.shape for o in outs] != [e.shape for e in expected]:
        raise TuneFarmError(
            f"output shapes {[o.shape for o in outs]} differ from the reference "
            f"{[e.shape for e in expected]}"
        )
    worst, agree = 0.0, True
    for out, ref in zip(outs, expected, strict=True):
        err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        # fp32 reductions round differently in different schedules: tolerate RTOL of the
        # output's scale on every element, plus RTOL of each element's own magnitude.
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        agree &= bool(np.all(err <= RTOL * max(scale, ATOL) + RTOL * np.abs(ref)))
        worst = max(worst, float(err.max()) if err.size else 0.0)
    return worst, agree


def _variants(report: BuildReport, called: list[str]) -> dict[str, str]:
    """Which variant of each symbolic kernel ran: a bucket kernel is named after its kernel
    (``fused_matmul_add_s16``), so a called name belongs to the longest kernel name that
    prefixes it (``fused_matmul_add_add1_s16`` is a variant of ``fused_matmul_add_add1``,
    not of ``fused_matmul_add``); a name that is itself a kernel is that kernel's generic
    variant."""
    names = {k.name for k in report.kernels}
    ran: dict[str, str] = {}
    for c in called:
        if c in names or "_dispatch" in c:
            continue
        owners = [n for n in names if c.startswith(n + "_")]
        if owners:
            owner = max(owners, key=len)
            ran.setdefault(owner, c[len(owner) + 1 :])
    return {k.name: ran.get(k.name, "generic") for k in report.kernels if k.symbolic}


def bench(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shapes: list[dict[str, int]] | None = None,
    *,
    repeat: int = 5,
    min_repeat_ms: int = 50,
) -> list[BenchResult]:
    """Build untuned and tuned once, then run both (and the model's reference) on the same
    random inputs at each shape (values of the symbolic variables).

    Weights kept as inputs (``model.params``) are passed as they are; only the data inputs
    are random."""
    if target.kind.name != "llvm":
        raise TuneFarmError("tunefarm bench runs locally on the CPU; use an llvm target")
    from tuner.buckets import upper_bounds

    bounds = upper_bounds(model.mod)
    for shape in shapes or []:
        for name, value in shape.items():
            if name in bounds and value > bounds[name]:
                raise TuneFarmError(
                    f"{name}={value} exceeds the model's tir_var_upper_bound {bounds[name]}"
                )
    # The reference (numpy, PyTorch) is run and timed first, before any TVM kernel: after a
    # call TVM's pool threads spin (TVM_THREAD_POOL_SPIN_COUNT) and take the cores from
    # OpenBLAS's and PyTorch's threads (numpy ran 25x slower right after TVM calls).
    runs = []
    for shape in shapes or [{}]:
        args = random_inputs(model.mod["main"], shape, np.random.default_rng(0), model.num_inputs)
        ref = None
        if model.reference is not None:
            ref = (model.reference.fn(*args), _time_call(model.reference.fn, args, repeat))
        runs.append((shape, args, ref))
    untuned, _ = compile(model.mod, target, None)
    tuned_ex, report = compile(model.mod, target, db)
    untuned_vm, tuned_vm = _VM(untuned), _VM(tuned_ex)
    results = []
    for shape, args, ref in runs:
        full = [*args, *model.params]
        ref_untuned, untuned_sec, _ = untuned_vm.run(full, repeat, min_repeat_ms)
        outs, tuned_sec, called = tuned_vm.run(full, repeat, min_repeat_ms)
        reference_sec = None
        reference, expected = "untuned", ref_untuned
        if model.reference is not None and ref is not None:
            expected, reference_sec = ref
            reference = model.reference.name
        max_err, agree = _compare(outs, expected)
        results.append(
            BenchResult(
                untuned_sec=untuned_sec,
                tuned_sec=tuned_sec,
                numpy_sec=reference_sec if reference == "numpy" else None,
                max_abs_err=max_err,
                reference=reference,
                agree=agree,
                tuned_share=report.tuned_share,
                untuned_kernels=report.untuned,
                shape=dict(shape),
                kernels=_variants(report, called),
                reference_sec=reference_sec,
            )
        )
    return results
