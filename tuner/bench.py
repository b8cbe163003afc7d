"""Benchmark a model: untuned default build vs tuned build vs a reference implementation, and
the runtimes a user would pick instead.

The reference is the model's own (``Model.reference``): numpy for TVMScript files that define
``numpy_reference``, PyTorch for ``.pt2`` exported programs. Without one (ONNX, JSON) the
untuned TVM build is the numerical reference.

Other runtimes (:data:`RUNTIMES`), when installed: ``torch.compile`` (inductor, CPU,
``dynamic=True``) of a ``.pt2`` model's exported program, and ONNX Runtime (CPU execution
provider) on the ``torch.onnx.export`` of that program or on an ``.onnx`` file itself. Each
one's outputs are checked against the reference; one that cannot run (not installed, the export
fails) is reported with a one-line reason instead of figures.

Protocol: every runtime uses the same thread count (:func:`bench_threads`: ``torch`` threads,
ORT's intra-op threads and TVM's pool). The reference and the other runtimes are run and timed
before any TVM kernel in the process (after a call TVM's pool threads spin and take the cores
from the others' threads), their repeats interleaved round-robin; then the untuned and tuned
builds, interleaved the same way. A first call at each shape is excluded from the timings and
reported (``warmup_sec``: ``torch.compile`` compiles, or recompiles, there). Last, the
reference and each other runtime are timed back to back with the tuned build, round after
round (:func:`_paired`, the process quiet before each sample): the ratios reported
(``vs_runtime``, ``vs_reference``, the table's ``(N.NNx)``) are the medians of those paired
rounds, which a slow phase of a shared VM hits on both sides alike; the phases' medians stay
the reported times.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from database import TuneFarmDatabase
from database.errors import error_summary
from tuner.compile import BuildReport, compile
from tuner.errors import TuneFarmError
from tuner.frontends.reference import flat_outputs
from tuner.kernel_profile import KernelProfile, profile_kernels, time_per_call
from tuner.model import Model
from tuner.symbolic.walk import missing_vars

RTOL, ATOL = 1e-4, 1e-5
NOISY = 0.25  # (max - min) / median over the repeats above this: the figure is marked noisy
# The other runtimes bench can time beside TuneFarm (the model formats each one runs).
RUNTIMES = ("torch.compile", "onnxruntime")
_RUNS = {"torch.compile": (".pt2",), "onnxruntime": (".pt2", ".onnx")}


@dataclass(frozen=True)
class RuntimeResult:
    """Another runtime at one shape: its median time, its outputs checked against the
    reference, or why it did not run (``error``, one line)."""

    name: str  # "torch.compile", "onnxruntime"
    sec: float | None = None
    max_abs_err: float | None = None
    agree: bool | None = None
    warmup_sec: float | None = None  # the first call at this shape (compilation), not timed
    setup_sec: float | None = None  # before any call: the ONNX export and session, the wrapper
    error: str | None = None
    spread: float | None = None  # (max - min) / median of the repeats

    @property
    def ok(self) -> bool:
        return self.error is None and self.sec is not None


@dataclass(frozen=True)
class Paired:
    """Another runtime (or the reference) timed back to back with the tuned build, round after
    round (:func:`_paired`): the median of the rounds' ratios, their spread ((max - min) /
    median) and the median of each side's own times in those rounds."""

    ratio: float  # its time / tuned's time: above 1, tuned is faster
    spread: float
    sec: float
    tuned_sec: float


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
    runtimes: tuple[RuntimeResult, ...] = ()  # the other runtimes (torch.compile, onnxruntime)
    threads: int | None = None  # threads of every runtime (TVM, torch, ORT)
    # (max - min) / median of the repeats of "tuned", "untuned", "reference"
    spread: dict[str, float] = field(default_factory=dict)
    # where the tuned build's time goes (bench(kernels=True)): each kernel timed alone
    profile: KernelProfile | None = None
    # the reference (by its name) and each other runtime timed back to back with the tuned
    # build: the ratios reported
    paired: dict[str, Paired] = field(default_factory=dict)

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
        """Reference time / tuned time (> 1: the tuned build is faster): the paired ratio
        where there is one."""
        if self.reference in self.paired:
            return self.paired[self.reference].ratio
        return self.reference_sec / self.tuned_sec if self.reference_sec else None

    def vs_runtime(self, name: str) -> float | None:
        """``name``'s time / tuned time (> 1: the tuned build is faster): the median of the
        paired rounds where there are some (:func:`_paired`), else the ratio of the two
        medians; None where it did not run."""
        rt = self.runtime(name)
        if rt is None or not rt.ok or not rt.sec:
            return None
        return self.paired[name].ratio if name in self.paired else rt.sec / self.tuned_sec

    def runtime(self, name: str) -> RuntimeResult | None:
        return next((r for r in self.runtimes if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["profile"] = self.profile.to_dict() if self.profile is not None else None
        out["speedup"], out["vs_numpy"] = self.speedup, self.vs_numpy
        out["vs_reference"] = self.vs_reference
        out["slower_than_untuned"] = self.slower
        out["runtimes"] = {
            r.name: {
                **{k: v for k, v in asdict(r).items() if k != "name"},
                "tuned_speedup": self.vs_runtime(r.name),
            }
            for r in self.runtimes
        }
        return out


def shape_label(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "static"


def bench_threads(target: tvm.target.Target | None = None) -> int:
    """The thread count of every runtime bench times: ``TVM_NUM_THREADS``, else the target's
    ``num-cores``, else the machine's CPUs (TVM's own default on x86 is half the CPUs)."""
    env = os.environ.get("TVM_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = target.attrs.get("num-cores") if target is not None else None
    return int(cores) if cores else (os.cpu_count() or 1)


def runtimes_for(model: Model) -> tuple[str, ...]:
    """The other runtimes that can run ``model``'s format (torch.compile: .pt2; ORT: .pt2
    through its ONNX export, and .onnx)."""
    return tuple(n for n in RUNTIMES if model.path.suffix in _RUNS[n])


def runtime_notes(results: list[BenchResult]) -> list[str]:
    """One line per other runtime: why it did not run, mismatches, torch.compile's warm-up."""
    notes: list[str] = []
    names = list(dict.fromkeys(r.name for res in results for r in res.runtimes))
    for name in names:
        rows = [(res, res.runtime(name)) for res in results]
        rows = [(res, rt) for res, rt in rows if rt is not None]
        failed = [(res, rt) for res, rt in rows if rt.error and rt.sec is None]
        if failed and len(failed) == len(rows):
            notes.append(f"{name}: not run: {failed[0][1].error}")
            continue
        for res, rt in failed:
            notes.append(f"{name} at {shape_label(res.shape)}: not run: {rt.error}")
        bad = [
            shape_label(res.shape) for res, rt in rows if rt.sec is not None and rt.agree is False
        ]
        if bad:
            errs = [rt.max_abs_err for _, rt in rows if rt.agree is False and rt.max_abs_err]
            worst = f" (max err {max(errs):.1e})" if errs else ""
            where = ", ".join(bad)
            notes.append(f"{name}: output MISMATCH against the reference at {where}{worst}")
        warm = [(res, rt.warmup_sec) for res, rt in rows if rt.warmup_sec is not None]
        if name == "torch.compile" and warm:
            per = ", ".join(f"{shape_label(res.shape)} {sec:.1f} s" for res, sec in warm)
            notes.append(
                f"torch.compile: warm-up (compilation) {sum(s for _, s in warm):.1f} s in all, "
                f"excluded from its times: {per}"
            )
        setup = next((rt.setup_sec for _, rt in rows if rt.setup_sec), None)
        if name == "onnxruntime" and setup:
            notes.append(
                f"onnxruntime: setup (the ONNX export, the session) {setup:.1f} s, not timed"
            )
    noisy = noisy_figures(results)
    if noisy:
        load = f" (load average {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else ""
        notes.append(
            f"noisy: {len(noisy)} figure(s) spread by more than {NOISY:.0%} over the repeats"
            f"{load}: {', '.join(noisy[:6])}{' ...' if len(noisy) > 6 else ''}; re-run on a "
            "quiet machine"
        )
    return notes


def noisy_figures(results: list[BenchResult]) -> list[str]:
    """``runtime@shape`` of every time, and ``runtime/tuned@shape`` of every paired ratio,
    whose spread over the repeats is above :data:`NOISY`."""
    out = []
    for r in results:
        spreads = dict(r.spread)
        spreads |= {rt.name: rt.spread for rt in r.runtimes if rt.spread is not None}
        spreads |= {f"{k}/tuned": v.spread for k, v in r.paired.items()}
        out += [f"{k}@{shape_label(r.shape)}" for k, v in spreads.items() if v > NOISY]
    return out


def slower_shapes(results: list[BenchResult]) -> list[str]:
    """The shapes (``s=1``, ``static``) at which the tuned build ran slower than untuned."""
    return [shape_label(r.shape) for r in results if r.slower]


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
                missing = missing_vars(dim, values)
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
        self.rt = ex.jit()  # what the VM runs; its kernels are looked up here
        self.vm = relax.VirtualMachine(self.rt, self.dev)
        self.called: list[str] = []

    def profile(self, args: list[np.ndarray], model_sec: float) -> KernelProfile:
        """Each kernel call of one run at ``args``, timed alone (:mod:`tuner.kernel_profile`)."""
        tvm_args = [tvm.runtime.tensor(a, device=self.dev) for a in args]
        return profile_kernels(self.vm, self.rt, tvm_args, model_sec)

    def _instrument(self, _func: Any, name: Any, before: bool, *_rest: Any) -> int:
        if before:
            self.called.append(str(name))
        return 0

    def first(self, args: list[np.ndarray], min_repeat_ms: int) -> tuple:
        """Run once (recording the kernels called); returns the outputs, the called kernels
        and a timer: one repeat per call (at least ``min_repeat_ms``), seconds per run."""
        tvm_args = [tvm.runtime.tensor(a, device=self.dev) for a in args]
        self.called.clear()
        self.vm.set_instrument(self._instrument)
        out = flat_outputs(self.vm["main"](*tvm_args))
        self.vm.set_instrument(None)  # time without the instrument's overhead
        evaluator = self.vm.time_evaluator(
            "main", self.dev, number=1, repeat=1, min_repeat_ms=min_repeat_ms
        )
        return out, list(self.called), lambda: float(evaluator(*tvm_args).results[0])


def _wait_quiet(timeout_s: float = 1.0, window_s: float = 0.02, busy: float = 0.1) -> None:
    """Sleep until this process's threads use less than ``busy`` of a core over ``window_s``:
    the spinning threads of the runtime timed last (ORT's, TVM's pools, OpenMP's) must not
    take the cores from the next one (ORT spinning made PyTorch 15x slower here)."""
    start = cpu_wall = time.perf_counter()
    cpu = time.process_time()
    while True:
        time.sleep(window_s)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        if cpu2 - cpu < busy * (wall2 - cpu_wall) or wall2 - start >= timeout_s:
            return
        cpu, cpu_wall = cpu2, wall2


def _interleave(
    timers: dict[str, Callable[[], float]], repeat: int
) -> dict[str, tuple[float, float]]:
    """(median, spread) of ``repeat`` samples of each timer, taken round-robin (the order
    rotated every round, the process quiet before each sample) so that a change of load hits
    every figure alike; spread = (max - min) / median."""
    names = list(timers)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            if len(names) > 1:
                _wait_quiet()
            samples[name].append(timers[name]())
    return {name: _median_spread(values) for name, values in samples.items()}


def _median_spread(values: Sequence[float]) -> tuple[float, float]:
    """The median of ``values`` and their spread, (max - min) / median."""
    med = statistics.median(values)
    return med, (max(values) - min(values)) / med if med > 0 else 0.0


def _paired(
    tuned: Callable[[], float], others: dict[str, Callable[[], float]], repeat: int
) -> dict[str, Paired]:
    """Each of ``others`` timed back to back with the tuned build, ``repeat`` rounds (which
    of the two goes first alternates, the process quiet before each sample), summed up per
    name as a :class:`Paired`. A slow phase of the machine that lasts longer than a round
    hits both samples of the round alike, so these ratios hold still where two medians taken
    minutes apart (one phase for the other runtimes, one for TVM) do not."""
    out = {}
    for name, timer in others.items():
        rounds: list[tuple[float, float]] = []  # (its time, tuned's time)
        for r in range(repeat):
            pair = [timer, tuned] if r % 2 == 0 else [tuned, timer]
            secs = []
            for fn in pair:
                _wait_quiet()
                secs.append(fn())
            rounds.append((secs[0], secs[1]) if r % 2 == 0 else (secs[1], secs[0]))
        ratios = [sec / t for sec, t in rounds if t > 0]
        if ratios:
            out[name] = Paired(
                *_median_spread(ratios),
                statistics.median(sec for sec, _ in rounds),
                statistics.median(t for _, t in rounds),
            )
    return out


def compare_outputs(outs: list[np.ndarray], expected: list[np.ndarray]) -> tuple[float, bool]:
    """(largest error, whether every output agrees with ``expected`` within tolerance)."""
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


@dataclass
class _Other:
    """Another runtime while bench runs: its runner, or why it cannot run."""

    name: str
    fn: Callable[..., list[np.ndarray]] | None = None
    error: str | None = None
    setup_sec: float | None = None
    outs: dict[int, list[np.ndarray]] = field(default_factory=dict)
    warmup: dict[int, float] = field(default_factory=dict)
    sec: dict[int, tuple[float, float]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)


def _one_line(err: BaseException) -> str:
    if isinstance(err, TuneFarmError):
        return error_summary(err, with_type=False)
    from tuner.frontends.torch import root_cause

    return root_cause(err)


def _program(model: Model) -> Any:
    """The exported program of a ``.pt2`` model: the reference's own, else loaded again."""
    program = getattr(getattr(model.reference, "fn", None), "program", None)
    if program is not None:
        return program
    from tuner.frontends.torch import load_program

    return load_program(model.path)


def _prepare(model: Model, names: Sequence[str], threads: int, tmp: str) -> list[_Other]:
    """A runner for each of ``names`` (compiled lazily: torch.compile compiles at the first
    call), or the one-line reason it cannot run."""
    others = []
    for name in names:
        other = _Other(name)
        start = time.perf_counter()
        try:
            if model.path.suffix not in _RUNS[name]:
                raise TuneFarmError(f"runs {' and '.join(_RUNS[name])} models only")
            if name == "torch.compile":
                from tuner.frontends.torch import compiled_runner

                other.fn = compiled_runner(_program(model))
            else:
                try:
                    import onnxruntime  # noqa: F401
                except ImportError:
                    raise TuneFarmError("not installed: pip install 'tunefarm[ort]'") from None
                from tuner.frontends.onnx import ort_runner

                path = model.path
                if model.path.suffix == ".pt2":
                    from tuner.frontends.torch import export_onnx

                    path = export_onnx(_program(model), Path(tmp) / "model.onnx")
                other.fn = ort_runner(path, threads)
            other.setup_sec = time.perf_counter() - start
        except Exception as err:
            other.error = _one_line(err)
        others.append(other)
    return others


_RefRun = tuple[list[np.ndarray], float, float]  # the reference's outputs, time and spread


def _run_others(
    reference: Callable[..., list[np.ndarray]] | None,
    others: list[_Other],
    runs: list[tuple[dict[str, int], list[np.ndarray]]],
    repeat: int,
    min_sec: float,
) -> tuple[list[_RefRun | None], list[dict[str, Callable[[], float]]]]:
    """Run and time the reference and the other runtimes at each shape, interleaved, before
    any TVM kernel: per shape the reference's outputs and time (None without a reference),
    and the timers of those that ran there (the reference's under ``""``), which time them
    again beside TVM (:func:`_paired`); the others' outputs, warm-up and times are kept in
    them."""
    refs: list[_RefRun | None] = []
    shape_timers: list[dict[str, Callable[[], float]]] = []
    for i, (shape, args) in enumerate(runs):
        timers: dict[str, Callable[[], float]] = {}
        ref_out = None
        if reference is not None:
            ref_out = reference(*args)  # also the warm-up call
            timers[""] = lambda fn=reference, a=args: time_per_call(fn, a, min_sec)
        for other in others:
            if other.fn is None:
                continue
            start = time.perf_counter()
            try:
                other.outs[i] = other.fn(*args)
            except Exception as err:
                other.errors[i] = _one_line(err)
                if not other.outs:  # never ran: the same failure at every shape
                    other.error = f"failed at {shape_label(shape)}: {other.errors[i]}"
                    other.fn = None
                continue
            other.warmup[i] = time.perf_counter() - start
            timers[other.name] = lambda fn=other.fn, a=args: time_per_call(fn, a, min_sec)
        medians = _interleave(timers, repeat)
        for other in others:
            if other.name in medians:
                other.sec[i] = medians[other.name]
        refs.append((ref_out, *medians[""]) if ref_out is not None else None)
        shape_timers.append(timers)
    return refs, shape_timers


def _runtime_result(other: _Other, i: int, expected: list[np.ndarray]) -> RuntimeResult:
    if i not in other.outs:
        return RuntimeResult(other.name, error=other.errors.get(i) or other.error)
    try:
        max_err, agree = compare_outputs(other.outs[i], expected)
        error = None
    except TuneFarmError as err:
        max_err, agree, error = None, False, str(err)
    sec, spread = other.sec.get(i, (None, None))
    return RuntimeResult(
        other.name,
        sec=sec,
        spread=spread,
        max_abs_err=max_err,
        agree=agree,
        warmup_sec=other.warmup.get(i),
        setup_sec=other.setup_sec,
        error=error,
    )


def bench(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shapes: list[dict[str, int]] | None = None,
    *,
    repeat: int = 5,
    min_repeat_ms: int = 50,
    runtimes: Sequence[str] | None = None,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
    kernels: bool = False,
) -> list[BenchResult]:
    """Build untuned and tuned once, then run both, the model's reference and the other
    runtimes (``runtimes``, default :func:`runtimes_for` the model; ``()`` for none) on the
    same random inputs at each shape (values of the symbolic variables). ``traffic`` builds
    the tuned module as ``build --shape-profile`` does (see :func:`tuner.compile.compile`).
    With ``kernels``, each result also says where the tuned build's time goes
    (:attr:`BenchResult.profile`), measured after the timings.

    Weights kept as inputs (``model.params``) are passed as they are; only the data inputs
    are random."""
    if target.kind.name != "llvm":
        raise TuneFarmError("tunefarm bench runs locally on the CPU; use an llvm target")
    names = runtimes_for(model) if runtimes is None else tuple(dict.fromkeys(runtimes))
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown:
        raise TuneFarmError(
            f"unknown runtime(s) {', '.join(unknown)} (known: {', '.join(RUNTIMES)})"
        )
    from tuner.symbolic.buckets import upper_bounds

    bounds = upper_bounds(model.mod)
    for shape in shapes or []:
        for name, value in shape.items():
            if name in bounds and value > bounds[name]:
                raise TuneFarmError(
                    f"{name}={value} exceeds the model's tir_var_upper_bound {bounds[name]}"
                )
    # One thread count for all: TVM's pool reads TVM_NUM_THREADS at its first use (its own
    # default on x86 is half the CPUs), torch and ORT are told.
    threads = bench_threads(target)
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    if model.path.suffix == ".pt2" or (model.reference and model.reference.name == "pytorch"):
        import torch

        torch.set_num_threads(threads)
    runs = [
        (shape, random_inputs(model.mod["main"], shape, np.random.default_rng(0), model.num_inputs))
        for shape in shapes or [{}]
    ]
    # The reference (numpy, PyTorch) and the other runtimes are run and timed first, before
    # any TVM kernel: after a call TVM's pool threads spin (TVM_THREAD_POOL_SPIN_COUNT) and
    # take the cores from OpenBLAS's and PyTorch's threads (numpy ran 25x slower right after
    # TVM calls).
    min_sec = min_repeat_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="tunefarm-bench-") as tmp:
        others = _prepare(model, names, threads, tmp)
    reference = model.reference.fn if model.reference is not None else None
    refs, shape_timers = _run_others(reference, others, runs, repeat, min_sec)
    untuned, _ = compile(model.mod, target, None)
    tuned_ex, report = compile(model.mod, target, db, traffic=traffic)
    untuned_vm, tuned_vm = _VM(untuned), _VM(tuned_ex)
    results = []
    for i, ((shape, args), ref) in enumerate(zip(runs, refs, strict=True)):
        full = [*args, *model.params]
        ref_untuned, _, untuned_timer = untuned_vm.first(full, min_repeat_ms)
        outs, called, tuned_timer = tuned_vm.first(full, min_repeat_ms)
        medians = _interleave({"untuned": untuned_timer, "tuned": tuned_timer}, repeat)
        # then the reference and the others back to back with tuned: the ratios users read
        pairs = {
            (model.reference.name if name == "" and model.reference else name): timer
            for name, timer in shape_timers[i].items()
        }
        paired = _paired(tuned_timer, pairs, repeat)
        reference_sec = None
        reference_name, expected = "untuned", ref_untuned
        spread = {k: v[1] for k, v in medians.items()}
        if model.reference is not None and ref is not None:
            expected, reference_sec, spread["reference"] = ref
            reference_name = model.reference.name
        max_err, agree = compare_outputs(outs, expected)
        results.append(
            BenchResult(
                untuned_sec=medians["untuned"][0],
                tuned_sec=medians["tuned"][0],
                numpy_sec=reference_sec if reference_name == "numpy" else None,
                max_abs_err=max_err,
                reference=reference_name,
                agree=agree,
                tuned_share=report.tuned_share,
                untuned_kernels=report.untuned,
                shape=dict(shape),
                kernels=_variants(report, called),
                reference_sec=reference_sec,
                runtimes=tuple(_runtime_result(o, i, expected) for o in others),
                threads=threads,
                spread=spread,
                profile=tuned_vm.profile(full, medians["tuned"][0]) if kernels else None,
                paired=paired,
            )
        )
    return results


def time_build(
    model: Model,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    shapes: list[dict[str, int]],
    *,
    repeat: int = 3,
    min_repeat_ms: int = 50,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> list[KernelProfile]:
    """The tuned build at each shape: its time per call (median of ``repeat``) and its
    kernels timed alone (:mod:`tuner.kernel_profile`), built as ``bench`` builds it
    (``traffic``: as ``build --shape-profile``), on random inputs; no reference, no other
    runtime (the planner's calibration between stages)."""
    if target.kind.name != "llvm":
        raise TuneFarmError("timing a build runs locally on the CPU; use an llvm target")
    os.environ.setdefault("TVM_NUM_THREADS", str(bench_threads(target)))
    ex, _ = compile(model.mod, target, db, traffic=traffic)
    vm = _VM(ex)
    rng = np.random.default_rng(0)
    out = []
    for shape in shapes:
        args = [*random_inputs(model.mod["main"], shape, rng, model.num_inputs), *model.params]
        _, _, timer = vm.first(args, min_repeat_ms)
        out.append(vm.profile(args, _interleave({"tuned": timer}, repeat)["tuned"][0]))
    return out


def runtimes_table(results: list[BenchResult], title: str) -> Any:
    """The runtimes side by side at each shape (a rich Table), or None when no other runtime
    was asked for: TuneFarm tuned and untuned, the reference (PyTorch eager, numpy) and each
    other runtime with its time and, in parentheses, its time / tuned's time (above 1 the
    tuned build is faster); an output that does not match the reference is marked MISMATCH."""
    from rich.markup import escape
    from rich.table import Table

    from tuner.progress import fmt_sec

    if not results or not results[0].runtimes:
        return None
    first = results[0]
    ref = first.reference if first.reference not in ("untuned",) else None
    names = [r.name for r in first.runtimes]
    table = Table(
        title=f"{title}: runtimes side by side, {first.threads} threads each",
        caption="(N.NNx) = that runtime's time / TuneFarm tuned's time, the median of rounds "
        "timing the two back to back: above 1, tuned is faster; noisy: spread over the "
        f"repeats (of a time, or of a ratio's rounds) above {NOISY:.0%}",
    )
    cols = ["shape", "tuned", "untuned", *([_REF_NAMES.get(ref, ref)] if ref else []), *names]
    for col in cols:
        table.add_column(col, justify="left" if col == "shape" else "right")

    def ratio(value: float | None) -> str:
        return f" ({value:.2f}x)" if value else ""

    def noisy(spread: float | None) -> str:
        return " [yellow]noisy[/yellow]" if spread is not None and spread > NOISY else ""

    for r in results:
        row = [shape_label(r.shape), fmt_sec(r.tuned_sec) + noisy(r.spread.get("tuned"))]
        row.append(
            fmt_sec(r.untuned_sec)
            + ratio(r.untuned_sec / r.tuned_sec if r.tuned_sec else None)
            + noisy(r.spread.get("untuned"))
        )
        if ref:
            spread = max(r.spread.get("reference", 0.0), _paired_spread(r, ref))
            row.append(fmt_sec(r.reference_sec) + ratio(r.vs_reference) + noisy(spread))
        for name in names:
            rt = r.runtime(name)
            if rt is None or rt.sec is None:
                row.append("not run")
                continue
            spread = max(rt.spread or 0.0, _paired_spread(r, name))
            cell = escape(fmt_sec(rt.sec) + ratio(r.vs_runtime(name))) + noisy(spread)
            row.append(cell + (" [red]MISMATCH[/red]" if rt.agree is False else ""))
        if not r.agree:
            row[1] += " [red]MISMATCH[/red]"
        table.add_row(*row)
    return table


def _paired_spread(r: BenchResult, name: str) -> float:
    return r.paired[name].spread if name in r.paired else 0.0


_REF_NAMES = {"pytorch": "pytorch eager"}


# ------------------------------------------------------------------ traffic (--shape-profile)
@dataclass(frozen=True)
class TrafficStats:
    """One runtime's latency over a shape profile's traffic: weighted mean, p50 and p99."""

    mean_sec: float
    p50_sec: float
    p99_sec: float


@dataclass(frozen=True)
class TrafficSummary:
    """Latencies weighted by a shape profile: per runtime (``tuned``, ``untuned``, the
    reference by its name, the other runtimes that ran at every shape) its
    :class:`TrafficStats`; ``weights`` the share of traffic each benched shape stands for."""

    profile: str
    weights: tuple[tuple[str, float], ...]
    stats: dict[str, TrafficStats]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "weights": dict(self.weights),
            "stats": {k: asdict(v) for k, v in self.stats.items()},
            "tuned_speedup_mean": (
                self.stats["untuned"].mean_sec / self.stats["tuned"].mean_sec
                if "tuned" in self.stats and "untuned" in self.stats
                else None
            ),
        }


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The least value with at least ``q`` of the total weight at or below it."""
    pairs = sorted(zip(values, weights, strict=True))
    total, acc = sum(weights), 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= q * total - 1e-12:
            return value
    return pairs[-1][0]


def traffic_summary(
    results: list[BenchResult], weights: Sequence[float], profile: str
) -> TrafficSummary:
    """Traffic-weighted mean, p50 and p99 latency of each runtime over ``results`` (one per
    benched shape, ``weights[i]`` the share of traffic ``results[i]``'s shape stands for).
    A runtime missing at some shape (did not run there) is left out."""
    if len(results) != len(weights) or not results:
        raise TuneFarmError("traffic summary: one weight per benched shape is needed")
    series: dict[str, list[float | None]] = {
        "tuned": [r.tuned_sec for r in results],
        "untuned": [r.untuned_sec for r in results],
    }
    if results[0].reference != "untuned":
        series[results[0].reference] = [r.reference_sec for r in results]
    for name in dict.fromkeys(rt.name for r in results for rt in r.runtimes):
        series[name] = [
            rt.sec if (rt := r.runtime(name)) is not None and rt.ok else None for r in results
        ]
    stats = {}
    for name, secs in series.items():
        if any(s is None for s in secs):
            continue
        vals = [float(s) for s in secs if s is not None]
        total = sum(weights)
        stats[name] = TrafficStats(
            mean_sec=sum(v * w for v, w in zip(vals, weights, strict=True)) / total,
            p50_sec=weighted_quantile(vals, weights, 0.50),
            p99_sec=weighted_quantile(vals, weights, 0.99),
        )
    labels = tuple((shape_label(r.shape), float(w)) for r, w in zip(results, weights, strict=True))
    return TrafficSummary(profile, labels, stats)


def traffic_table(summary: TrafficSummary, title: str) -> Any:
    """The traffic summary as a rich Table: one row per runtime, mean / p50 / p99."""
    from rich.table import Table

    from tuner.progress import fmt_sec

    table = Table(title=f"{title}: latency over the traffic of {summary.profile}")
    for col in ("runtime", "mean", "p50", "p99", "mean vs tuned"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    tuned = summary.stats.get("tuned")
    for name, st in summary.stats.items():
        ratio = f"{st.mean_sec / tuned.mean_sec:.2f}x" if tuned and tuned.mean_sec else "-"
        table.add_row(
            _REF_NAMES.get(name, name),
            fmt_sec(st.mean_sec),
            fmt_sec(st.p50_sec),
            fmt_sec(st.p99_sec),
            ratio,
        )
    return table
