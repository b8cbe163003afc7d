"""Where a built model's time goes: each kernel call of one model call, timed alone.

One model call runs under a VM instrument that records every kernel it calls with copies of
the call's arguments; each call is then replayed alone in a loop (at least ``min_sec``) and
timed. The calls are summed per function (a bucket kernel is its own function:
``fused_matmul_add_s64_static``), and what the model's measured time leaves over is the VM's
own work: allocations, shape checks, the dispatch's branches, runtime builtins.

A kernel timed alone runs on warm caches and an awake thread pool, so the sum is a lower
bound of the kernels' share; the rest is an upper bound of the VM's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import tvm

if TYPE_CHECKING:
    from database.evidence import Evidence

BUILTIN = "vm.builtin."


@dataclass(frozen=True)
class KernelTime:
    """One function the model calls: how often per model call, and its time per model call."""

    name: str
    calls: int
    sec: float  # summed over the calls of one model call


@dataclass(frozen=True)
class KernelProfile:
    """The functions of one model call by time, and the model's own measured time."""

    model_sec: float
    kernels: tuple[KernelTime, ...]  # most time first
    vm_calls: int  # every call the VM made: kernels, shape functions and builtins
    # the evidence of the record behind each tuned function, by name (BuildReport)
    evidence: Mapping[str, Evidence] = field(default_factory=dict, compare=False)

    @property
    def kernel_sec(self) -> float:
        return sum(k.sec for k in self.kernels)

    @property
    def kernel_calls(self) -> int:
        return sum(k.calls for k in self.kernels)

    @property
    def rest_sec(self) -> float:
        """The model's time outside its kernels (never below 0)."""
        return max(self.model_sec - self.kernel_sec, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_sec": self.model_sec,
            "kernel_sec": self.kernel_sec,
            "rest_sec": self.rest_sec,
            "vm_calls": self.vm_calls,
            "kernels": [self._kernel_dict(k) for k in self.kernels],
        }

    def _kernel_dict(self, k: KernelTime) -> dict[str, Any]:
        from database.evidence import evidence_fields

        return asdict(k) | evidence_fields(self.evidence.get(k.name))


def _copy(arg: Any) -> Any:
    return tvm.runtime.tensor(arg.numpy()) if isinstance(arg, tvm.runtime.Tensor) else arg


def time_per_call(fn: Callable[..., Any], args: Sequence[Any], min_sec: float) -> float:
    """One repeat: seconds per call of ``fn(*args)``, looping for at least ``min_sec``."""
    start, number = time.perf_counter(), 0
    while True:
        fn(*args)
        number += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_sec:
            return elapsed / number


def _time_alone(fn: Any, args: Sequence[Any], min_sec: float) -> float:
    """Seconds per call of ``fn(*args)``: the median of 3 repeats of at least ``min_sec``."""
    fn(*args)  # warm up
    return sorted(time_per_call(fn, args, min_sec) for _ in range(3))[1]


def profile_kernels(
    vm: Any, rt_mod: Any, args: Sequence[Any], model_sec: float, min_sec: float = 0.005
) -> KernelProfile:
    """Profile one call of ``vm["main"](*args)`` (``rt_mod``: the module the VM was made
    from, where its kernels are looked up); ``model_sec`` is the model's measured time."""
    calls: list[tuple[str, list[Any]]] = []
    count = [0]

    def record(_func: Any, name: Any, before: bool, _ret: Any, *call_args: Any) -> int:
        if before:
            count[0] += 1
            if not str(name).startswith(BUILTIN):
                calls.append((str(name), [_copy(a) for a in call_args]))
        return 0

    vm.set_instrument(record)
    try:
        vm["main"](*args)
    finally:
        vm.set_instrument(None)
    totals: dict[str, list[float]] = {}
    for name, call_args in calls:
        try:
            fn = rt_mod.get_function(name, True)
        except AttributeError:  # a Relax function (a dispatch region): its calls are listed
            continue
        totals.setdefault(name, []).append(_time_alone(fn, call_args, min_sec))
    kernels = sorted(
        (KernelTime(name, len(secs), sum(secs)) for name, secs in totals.items()),
        key=lambda k: (-k.sec, k.name),
    )
    return KernelProfile(model_sec, tuple(kernels), count[0])
