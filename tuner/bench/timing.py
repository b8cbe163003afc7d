"""The timing harness of bench: one thread count for every runtime, random inputs at a shape,
a Relax VM that records the kernels it ran, samples interleaved round-robin or paired back to
back with the tuned build, and the output check against the reference."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relax

from tuner.bench.results import Paired
from tuner.errors import TuneFarmError
from tuner.frontends.reference import flat_outputs
from tuner.kernel_profile import KernelProfile, profile_kernels
from tuner.symbolic.walk import missing_vars

RTOL, ATOL = 1e-4, 1e-5


def bench_threads(target: tvm.target.Target | None = None) -> int:
    """The thread count of every runtime bench times: ``TVM_NUM_THREADS``, else the target's
    ``num-cores``, else the machine's CPUs (TVM's own default on x86 is half the CPUs)."""
    env = os.environ.get("TVM_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = target.attrs.get("num-cores") if target is not None else None
    return int(cores) if cores else (os.cpu_count() or 1)


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


class InstrumentedVM:
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


def wait_quiet(timeout_s: float = 1.0, window_s: float = 0.02, busy: float = 0.1) -> None:
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


def interleave(
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
                wait_quiet()
            samples[name].append(timers[name]())
    return {name: median_spread(values) for name, values in samples.items()}


def median_spread(values: Sequence[float]) -> tuple[float, float]:
    """The median of ``values`` and their spread, (max - min) / median."""
    med = statistics.median(values)
    return med, (max(values) - min(values)) / med if med > 0 else 0.0


def time_paired(
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
                wait_quiet()
                secs.append(fn())
            rounds.append((secs[0], secs[1]) if r % 2 == 0 else (secs[1], secs[0]))
        ratios = [sec / t for sec, t in rounds if t > 0]
        if ratios:
            out[name] = Paired(
                *median_spread(ratios),
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
