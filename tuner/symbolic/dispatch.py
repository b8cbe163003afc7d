"""Shape dispatch: route each symbolic kernel call to the range kernel of the right bucket.

Rule (documented in docs/symbolic-shapes.md): for a kernel whose only symbolic variable is
``v``, with tuned buckets ``b1 < b2 < ... < bk``, a call with runtime value ``v <= bk`` runs
the kernel of least estimated time at ``v``:

- the generic kernel (untuned default schedule, symbolic): its time measured at the smallest
  bucket ``B >= v`` (every tune times each kernel's generic code at each bucket's shapes;
  databases tuned before have the static default schedule's time, a lower bound), scaled by
  the work at ``v``: ``generic_sec(B) * (v / B) ** d``; it pads nothing and copies nothing;
- a bucket's kernel: its measured time at its bucket (a range kernel's own, timed by the tune
  at the bucket, :mod:`tuner.job.probes`; else its static kernel's), scaled by the work
  at ``v`` padded to its tile (a static kernel: always its bucket's time), **plus the cost of
  the padded branch**
  itself (:func:`pad_overhead`: a copy per padded input and a crop of the output, and the
  elements they write), which dominates at small ``v`` (a 64-row pad of ``x[1, 128]`` copies
  64 rows); a static kernel also serves its own bucket value unpadded (*exact*: no branch
  cost).

Above ``bk``, the kernel of least time per unit of work (the padding overhead included); with
a shape profile (``build --shape-profile``), the kernel of least expected time over the
profile's values above ``bk``, weighted by their traffic (padding ``v`` to a tile costs
different kernels differently just above the largest bucket).
Work grows as ``v ** d``, ``d`` the number of loop axes over ``v`` in the kernel's busiest
block (1 for ``x @ W``, 2 for ``q @ k^T`` or softmax over ``s x s`` scores). Kernels that
cannot be padded (a reduction over ``v`` that no pad value leaves unchanged), depend on
several variables or have no record run the generic kernel (default schedule).

The dispatch lives in Relax and branches once per call of the model: the values of each
variable are cut at every interval end of every kernel, and ``main`` calls, per region, a copy
of itself whose kernel calls are that region's picks (a bucket branch pads the inputs along
``v`` to a multiple of the range kernel's tile, with zeros or -inf where a max or softmax
reduces over ``v``, one copy per input, calls the padded kernel, predicate-free, and crops
the result back to ``v`` rows). Where that cannot be done, each call site calls a dispatch
function of its own.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax, tirx
from tvm.s_tir.schedule import ScheduleError

from database import TuneFarmDatabase, shash_of
from tuner.pipeline import normalize
from tuner.symbolic.buckets import bind_kernel
from tuner.symbolic.padding import CopyKernels, padded_to
from tuner.symbolic.rangekernel import (
    coefficient,
    free_inputs,
    instance_points,
    instances,
    is_default,
    pad_values,
    range_variants,
    replay,
    rewrite_tiles,
    static_key,
    symbolic_var,
    uses_var,
    work_degree,
)
from tuner.symbolic.walk import dim_vars, param_dims

# What a padded branch costs beyond its kernel: one serial copy per padded input and one crop
# of the output (tuner/symbolic/padding.py). Measured on a 2-core AMD EPYC (TVM 0.27, in the
# VM, allocation included): a pad and a crop of x[1, 3, 128] cost 0.85 us, of [1, 2, 100, 100]
# to 128 x 128 2.8 us, of [8, 200, 192] to 256 rows 43 us (0.06 ns an element out of cache).
# Both constants are ~1.2-1.7x those figures: erring high makes the rule pick the generic
# kernel where the two are close, never a padded kernel that is slower.
PAD_OP_SEC = 0.5e-6  # one copy the branch adds (a pad or the crop)
PAD_ELEM_SEC = 0.1e-9  # one element such a copy writes
# A tuned kernel's time does not shrink with the work below this (capped at its measured
# time): it runs a parallel loop whose thread-pool wake-up and barrier cost a few us a call,
# more on a busy machine. Measured on the loaded 2-core VM at s=1: the layer norm tuned at
# s=64 (tile 1, 12.9 us there) took ~15 us, where scaling by rows predicts 0.2 us.
CALL_FLOOR_SEC = 5e-6
# A bucket kernel replaces the generic kernel only when estimated this many times faster: the
# estimates off the bucket are extrapolations of noisy measurements, and a wrong choice for
# the generic kernel costs at most the gain given up, never a slowdown against the untuned build.
GENERIC_MARGIN = 1.25


@dataclass(frozen=True)
class PadBuffer:
    """A buffer a padded branch pads (an input) or crops (the output)."""

    elements: int  # product of the dims that are not the variable
    axes: int  # how many dims are the variable
    output: bool = False


def pad_overhead(v: int, padded: int, buffers: tuple[PadBuffer, ...]) -> float:
    """Estimated time a branch spends padding the variable from ``v`` to ``padded`` and
    cropping the output back: one copy per padded input (every axis at once) writing the
    padded buffer, one crop writing the output's ``v``-sized elements
    (:mod:`tuner.symbolic.padding`). (A branch of tile 1 copies nothing: not called.)"""
    ops, written = 0, 0
    for buf in buffers:
        if buf.axes == 0:
            continue
        ops += 1
        written += buf.elements * (v if buf.output else padded) ** buf.axes
    return ops * PAD_OP_SEC + written * PAD_ELEM_SEC


@dataclass(frozen=True)
class BucketKernel:
    """One bucket's range kernel as added to the module."""

    value: int
    tile: int
    name: str
    level: str
    mean_sec: float
    # the kernel tuned at exactly ``value`` (constant shapes), serving values up to ``value``
    # padded to it; a range kernel (symbolic extents) otherwise. A static kernel of tile 1
    # is *exact*: called at ``value`` alone, with nothing padded or sliced
    static: bool = False
    # a static instance: the schedule tuned at bucket ``origin``, at constant ``value`` (a
    # point between buckets), priced as that bucket's time scaled by the work
    origin: int = 0

    @property
    def exact(self) -> bool:
        """A static kernel that serves its own bucket value alone, unpadded."""
        return self.static and self.tile == 1

    def padded(self, v: int) -> int:
        """The extent the kernel computes at ``v``: ``v`` rounded up to the tile (a static
        kernel: its bucket)."""
        return self.value if self.static else -(-v // self.tile) * self.tile

    def cost(self, v: int, degree: int = 1, buffers: tuple[PadBuffer, ...] = ()) -> float:
        """Estimated time at ``v``: the measured time scaled by the work done at ``v`` padded
        to the tile (a static kernel always does its bucket's work, and only up to it), plus
        the padding and slicing of ``buffers`` (:func:`pad_overhead`). The scaled time is
        never below :data:`CALL_FLOOR_SEC` (or the measured time, if less)."""
        if self.static and (v > self.value or (self.exact and v != self.value)):
            return math.inf
        p = self.padded(v)
        scaled = max(self.mean_sec * (p / self.value) ** degree, min(self.mean_sec, CALL_FLOOR_SEC))
        return scaled + self.overhead(v, buffers)

    def overhead(self, v: int, buffers: tuple[PadBuffer, ...]) -> float:
        """What the branch spends padding and slicing at ``v`` (nothing at a tile of 1)."""
        return 0.0 if self.tile == 1 else pad_overhead(v, self.padded(v), buffers)

    @property
    def label(self) -> str:
        if self.origin:
            return f"{'exact' if self.exact else 'static'}, {self.origin}'s schedule"
        return f"tile {self.tile}" if not self.static else "exact" if self.exact else "static"


@dataclass(frozen=True)
class KernelDispatch:
    """How one symbolic kernel is served: bucket kernels, or why only the generic one."""

    kernel: str
    var: str | None
    buckets: tuple[BucketKernel, ...] = ()
    reason: str | None = None  # why buckets are not used (when empty)
    # (bucket value, measured time of the generic kernel there), where recorded
    generic: tuple[tuple[int, float], ...] = ()
    degree: int = 1  # work grows as var ** degree
    # the buffers a bucket branch pads and crops (empty: padding assumed free)
    buffers: tuple[PadBuffer, ...] = ()
    # tuned at every bucket, and the default schedule measured fastest at each
    default_won: bool = False
    # observed traffic of ``var`` as (value, weight) pairs, from a shape profile: the values
    # above every bucket are served by the kernel of least expected time over them
    traffic: tuple[tuple[int, float], ...] = ()

    @functools.cached_property
    def intervals(self) -> tuple[tuple[int, BucketKernel | None], ...]:
        """``(upper, kernel)`` pairs: values up to ``upper`` (above the previous upper) run
        ``kernel`` (None: the generic kernel); values above the largest bucket run
        :attr:`above`."""
        return choose_intervals(self.buckets, self.generic, self.degree, self.buffers)

    @property
    def above(self) -> BucketKernel | None:
        """The kernel for values above the largest bucket (None: the generic kernel).

        Range kernels are valid for every value, so the bucket kernel with the least time
        per unit of work serves there (its padding overhead at the largest bucket included),
        unless it does not beat the generic kernel's measured time per unit at the largest
        bucket by :data:`GENERIC_MARGIN` (padding matters less and less as values grow).
        With :attr:`traffic` above the largest bucket, the same choice is made on the
        expected time over those values instead (each kernel's :meth:`BucketKernel.cost`
        there, the generic kernel's time at the largest bucket scaled by the work)."""
        if not self.buckets:
            return None
        d, top = self.degree, max(b.value for b in self.buckets)
        ranged = [b for b in self.buckets if not b.static]
        if not ranged:
            return None
        value, sec = max(self.generic, default=(1, math.inf))
        beyond = [(v, w) for v, w in self.traffic if v > top and w > 0]
        if beyond:

            def expected(b: BucketKernel) -> float:
                return sum(w * b.cost(v, d, self.buffers) for v, w in beyond)

            best = min(ranged, key=lambda b: (expected(b), -b.value))
            generic = sum(w * sec * (v / value) ** d for v, w in beyond)
            return None if generic <= GENERIC_MARGIN * expected(best) else best

        def per_unit(b: BucketKernel) -> float:
            return b.mean_sec / b.value**d + b.overhead(top, self.buffers) / top**d

        best = min(ranged, key=lambda b: (per_unit(b), -b.value))
        generic_rate = sec / value**d
        if generic_rate <= GENERIC_MARGIN * per_unit(best):
            return None
        return best

    @functools.cached_property
    def used(self) -> tuple[BucketKernel, ...]:
        """The bucket kernels the rule runs for some value (the others are not built)."""
        chosen = {bk for _, bk in self.intervals if bk is not None} | {self.above}
        return tuple(bk for bk in self.buckets if bk in chosen)

    def describe(self) -> str:
        if not self.buckets:
            return f"generic ({self.reason})"
        lo, parts = 1, []
        for upper, bk in self.intervals:
            span = f"{self.var}={lo}" if lo == upper else f"{self.var}={lo}..{upper}"
            what = "generic" if bk is None else f"{self.var}{bk.value} ({bk.label})"
            parts.append(f"{span}: {what}")
            lo = upper + 1
        top, above = max(b.value for b in self.buckets), self.above
        how = " (by traffic)" if any(v > top for v, _ in self.traffic) else ""
        if above is None:
            return f"{', '.join(parts)}; generic above {top}{how}"
        return f"{', '.join(parts)}; above {top}{how}: {self.var}{above.value} ({above.label})"


def choose_intervals(
    buckets: tuple[BucketKernel, ...],
    generic: tuple[tuple[int, float], ...] = (),
    degree: int = 1,
    buffers: tuple[PadBuffer, ...] = (),
) -> tuple[tuple[int, BucketKernel | None], ...]:
    """For every value up to the largest bucket, the kernel with the least estimated time.

    Work at a value ``v`` is ``v ** degree``. A bucket kernel costs its measured time at its
    own bucket, scaled by the work it does at ``v`` (``v`` padded to its tile) but not below
    :data:`CALL_FLOOR_SEC`, plus what its branch spends padding ``buffers`` and slicing the
    output (:func:`pad_overhead`). The generic kernel, where its time at some bucket was
    recorded (the untuned default is measured by every tune), costs the least, over the
    buckets ``B >= v``, of its time at ``B`` scaled by the work at ``v`` (it pads nothing).
    Each is a lower bound (fixed costs do not shrink with ``v``), and the least of them
    discounts one inflated measurement, so the estimate errs toward the generic kernel, the
    untuned build's own. (Buckets below ``v`` do not count: the untuned ``probs @ V`` ran at
    82 GFLOPS at s=16 and 2.4 at s=64.) A bucket kernel
    replaces it only when estimated :data:`GENERIC_MARGIN` times faster. A static kernel
    (constant shapes, the very kernel measured at its bucket) serves values up to its bucket
    padded to it. Ties go to the generic kernel, then to the smaller bucket, then to a static
    kernel (range kernels index with symbolic strides and divisors, which can cost
    vectorization). Consecutive values with the same choice form one interval."""
    if not buckets:
        return ()
    generic_at = sorted(generic)
    out: list[tuple[int, BucketKernel | None]] = []
    for v in range(1, max(b.value for b in buckets) + 1):
        best = pick_kernel(buckets, generic_at, degree, buffers, v)
        if out and out[-1][1] is best:
            out[-1] = (v, best)
        else:
            out.append((v, best))
    return tuple(out)


def pick_kernel(
    buckets: Sequence[BucketKernel],
    generic: Sequence[tuple[int, float]],
    degree: int,
    buffers: tuple[PadBuffer, ...],
    v: int,
) -> BucketKernel | None:
    """The rule at one value ``v`` up to the largest bucket (see :func:`choose_intervals`;
    ``generic``: sorted ``(bucket, generic time)`` pairs). A bucket's exact kernel, measured
    at ``v`` itself, yields to another bucket's kernel only when that one is estimated
    :data:`GENERIC_MARGIN` times faster (to its own bucket's range kernels, also timed at
    ``v``, as to any kernel): the other buckets' estimates at ``v`` are extrapolations
    (BERT's FFN at s=16: the s=64 fine kernel scaled down to 12.4 µs took the s=16 exact
    kernel's 13.4 µs, and the model ran 1.06x slower there). A static instance's exact kernel
    keeps that margin though it is priced from its bucket, not measured at ``v``: its extents
    are constants, and on ViT (64-trial records) it then took b=12 from tile-1 range kernels
    (symbolic loops) and the model ran 0.90x the time before (interleaved A/B)."""
    best = min(buckets, key=lambda b: (b.cost(v, degree, buffers), b.value, not b.static))
    exact = next((b for b in buckets if b.exact and b.value == v), None)
    measured_here = best.value == v and not best.origin  # the same bucket's range kernel
    if (
        exact is not None
        and not measured_here
        and exact.cost(v, degree, buffers) <= GENERIC_MARGIN * best.cost(v, degree, buffers)
    ):
        best = exact
    if generic:
        above = [(b, t) for b, t in generic if b >= v] or list(generic[-1:])
        cost = min(sec * (v / value) ** degree for value, sec in above)
        if cost <= GENERIC_MARGIN * best.cost(v, degree, buffers):
            return None
    return best


@dataclass
class _Plan:
    dispatch: KernelDispatch
    kernels: list[tuple[BucketKernel, tirx.PrimFunc]] = field(default_factory=list)
    pads: tuple[float, ...] = ()  # per kernel input: the value its padding holds
    # the positions of the kernel inputs whose padding may hold anything (free_inputs)
    free: frozenset[int] = frozenset()


def offers_range(tile: int, degree: int) -> bool:
    """Whether a bucket's range kernel of ``tile`` is offered to the rule, for a kernel whose
    work grows as ``v ** degree``. Not at tile 1 with two or more loop axes over ``v``: every
    such loop is then symbolic (no constant inner tile to vectorize), and the kernel runs
    several times slower than its bucket's static time, which the rule scales it from.
    Measured on a 2-core AMD EPYC: GPT-2's ``probs @ V`` from the s=16 bucket (tile 1) took
    31 µs a call at s=32, where the s=64 static kernel takes 3.4 µs at 64; leaving such range
    kernels out made BERT and GPT-2 0.75-0.76x faster at s=32 and 0.59x at s=48, and no
    slower at s=100, whose range kernels of tile 8 stay (same database, interleaved).
    Only for range kernels the tune did not time (:mod:`tuner.job.probes`; databases
    tuned before): a timed one is priced by its own time and always offered."""
    return tile > 1 or degree < 2


def offers_variant(timed: bool, fine: bool, tile: int, degree: int) -> bool:
    """Whether a bucket's range variant is offered to the rule: with its own time where the
    tune measured it; untimed, a range kernel (never a fine variant) under :func:`offers_range`,
    priced at its static kernel's time. The build and the planner both offer by it."""
    return timed or (not fine and offers_range(tile, degree))


def timed_range_secs(
    db: TuneFarmDatabase,
    variants: Sequence[Any],
    bucket: dict[str, int],
    target: Any,
    mean_sec: float,
    degree: int,
) -> list[float | None]:
    """Each range variant's time at ``bucket`` as the rule prices it (None: the tune did not
    time it): its probe at the bucket padded to the tile, scaled back to the bucket,
    relative to the static kernel timed beside it, whose record's time (``mean_sec``) the
    static kernels are priced by (:mod:`tuner.job.probes`). The build and the planner
    both price by it."""
    if not variants:
        return []
    (value,) = bucket.values()
    beside = db.generic_sec(static_key(variants[0].key), bucket, target)
    out: list[float | None] = []
    for rk in variants:
        sec = db.generic_sec(rk.key, bucket, target)
        if sec is not None:
            if beside:
                sec *= mean_sec / beside
            sec *= (value / rk.padded(value)) ** degree
        out.append(sec)
    return out


def _plan(
    name: str,
    func: tirx.PrimFunc,
    target: Any,
    db: TuneFarmDatabase,
    traffic: Mapping[str, Mapping[int, float]],
) -> _Plan:
    norm = normalize(func)
    var = symbolic_var(norm["main"])
    if var is None:
        return _Plan(KernelDispatch(name, None, reason="several symbolic variables"))
    usable = bucket_workloads(db, norm["main"], var.name)
    if not usable:
        return _Plan(KernelDispatch(name, var.name, reason="no bucket records"))
    pads = pad_values(norm["main"], var.name)
    if pads is None:
        return _Plan(KernelDispatch(name, var.name, reason=f"reduces over {var.name}"))
    inputs = norm["main"].params[:-1]
    free = free_inputs(norm["main"], var.name, pads)
    plan = _Plan(
        KernelDispatch(name, var.name),
        pads=tuple(pads.get(p.name, 0.0) for p in inputs),
        free=frozenset(i for i, p in enumerate(inputs) if p.name in free),
    )
    generic: list[tuple[int, float]] = []
    default_won = 0  # buckets whose best record is the untuned default schedule
    family = shash_of(norm)
    degree = work_degree(norm["main"], var.name)
    below = [0, *(b[var.name] for b, _, _ in usable)]  # each bucket's lower neighbour
    for (bucket, static_mod, bound), lower in zip(usable, below, strict=False):
        # the generic code's own time at the bucket, measured by the tune (constant extents
        # let LLVM vectorize what symbolic ones do not: BERT's attention matmuls ran 10x
        # slower generic than their untuned static kernel at s=16); databases tuned before
        # it was measured have only the static default schedule's time, a lower bound
        generic_sec = db.generic_sec(family, bucket, target)
        default_sec = db.default_schedule_sec(static_mod, target)
        if generic_sec is not None or default_sec is not None:
            generic.append((bucket[var.name], default_sec if generic_sec is None else generic_sec))
        found = db.best(static_mod, target)
        if found is None:
            continue
        record, level, mean_sec = found
        default = is_default(record.trace)
        if default and generic_sec is None:
            default_won += 1
            continue  # the default schedule won, and its static kernel is all that was timed
        value = bucket[var.name]
        kname = f"{name}_{var.name}{value}"
        rewrite = rewrite_tiles(norm["main"], record.trace, var.name)
        # the default schedule's range kernel is the generic kernel
        variants = () if default else range_variants(norm["main"], record.trace, var.name, rewrite)
        timed = timed_range_secs(db, variants, bucket, target, mean_sec, degree)
        for rk, range_sec in zip(variants, timed, strict=True):
            # its own time where the tune measured it; else the static kernel's time under
            # the tile-1 rule (a fine variant is offered only with its own time)
            fine = rk is not variants[0]
            if offers_variant(range_sec is not None, fine, rk.tile, degree):
                sec = mean_sec if range_sec is None else range_sec
                bk = BucketKernel(value, rk.tile, f"{kname}_fine" if fine else kname, level, sec)
                plan.kernels.append((bk, _mark(rk.func, name, f"{var.name}={value}", rk.tile)))
        static = replay(record.trace, bound)
        if static is not None:  # the kernel that was measured, for values padded to the bucket
            bk = BucketKernel(value, value, f"{kname}_static", level, mean_sec, static=True)
            plan.kernels.append((bk, _mark(static, name, f"{var.name}={value}", value)))
            # and its static instances between the bucket below and this one
            bind = functools.partial(_bind_at, norm["main"], var.name)
            found = instances(rewrite, instance_points(lower, value), bind) if rewrite else []
            for at, func_at in found:
                sec = mean_sec * (at / value) ** degree
                bk = BucketKernel(at, at, f"{kname}_at{at}", level, sec, static=True, origin=value)
                plan.kernels.append((bk, _mark(func_at, name, f"{var.name}={value}@{at}", at)))
                # and at its point alone, unpadded, as the bucket's exact kernel (ViT at b=4:
                # without it every instance padded b=4 to 4, a copy in and a copy out)
                exact = BucketKernel(
                    at, 1, f"{kname}_at{at}_exact", level, sec, static=True, origin=value
                )
                plan.kernels.append((exact, _mark(func_at, name, f"{var.name}={value}@{at}", 1)))
            if value > 1:  # and at the bucket itself, where it pads nothing (its own copy,
                # marked tile 1, so that a report says which of the two ran)
                exact = BucketKernel(value, 1, f"{kname}_exact", level, mean_sec, static=True)
                plan.kernels.append((exact, _mark(static, name, f"{var.name}={value}", 1)))
    if not plan.kernels:
        reason = (
            "the default schedule measured fastest at every bucket"
            if default_won == len(usable)
            else "no transplantable record"
        )
        plan.dispatch = KernelDispatch(
            name, var.name, reason=reason, default_won=default_won == len(usable)
        )
    else:
        plan.dispatch = KernelDispatch(
            name,
            var.name,
            tuple(k for k, _ in plan.kernels),
            generic=tuple(generic),
            degree=degree,
            buffers=pad_buffers(norm["main"], var.name),
            traffic=tuple(sorted(traffic.get(var.name, {}).items())),
        )
    return plan


def bucket_workloads(
    db: TuneFarmDatabase, func: tirx.PrimFunc, var_name: str
) -> list[tuple[dict[str, int], tvm.IRModule, tvm.IRModule]]:
    """The stored static workloads of the symbolic kernel ``func`` at buckets of ``var_name``,
    as ``(bucket, stored workload, func bound to the bucket)``: ``func`` bound to each bucket
    value the database knows (:func:`bind_kernel`) where that kernel is a stored workload
    (found by structure, whatever the kernels were named when tuned), else the workload
    linked to ``func`` at that bucket when it was tuned. Traces are replayed on the bound
    kernel, never on the stored one: a record serves only the kernel it replays on."""
    bound: dict[int, tvm.IRModule | None] = {}  # func bound to each value, bound once

    def bound_at(value: int) -> tvm.IRModule | None:
        if value not in bound:
            bound[value] = bind_kernel(func, {var_name: value})
        return bound[value]

    out: dict[int, tuple[dict[str, int], tvm.IRModule, tvm.IRModule]] = {}
    for bucket in db.bucket_values():
        if set(bucket) == {var_name}:
            mod = bound_at(bucket[var_name])
            if mod is not None and db.has_workload(mod):
                out[bucket[var_name]] = (bucket, mod, mod)
    for bucket, stored in db.family_workloads(shash_of(normalize(func))):
        if set(bucket) == {var_name} and bucket[var_name] not in out:
            mod = bound_at(bucket[var_name])
            if mod is not None:
                out[bucket[var_name]] = (bucket, stored, mod)
    return [out[v] for v in sorted(out)]


def pad_buffers(func: tirx.PrimFunc, var_name: str) -> tuple[PadBuffer, ...]:
    """The buffers a bucket branch of ``func`` pads (its inputs) and crops (its output)."""
    out = []
    params = list(func.params)
    for i, param in enumerate(params):
        shape = list(getattr(param, "shape", None) or ())
        coefs = [c for d in shape if (c := coefficient(d, var_name)) is not None]
        elements = math.prod(int(d) for d in shape if isinstance(d, tirx.IntImm))
        axes, elements = len(coefs), elements * math.prod(coefs)
        out.append(PadBuffer(elements, axes, output=i == len(params) - 1))
    return tuple(out)


def _bind_at(func: tirx.PrimFunc, var_name: str, value: int) -> tvm.IRModule | None:
    return bind_kernel(func, {var_name: value})


def _mark(func: tirx.PrimFunc, kernel: str, bucket: str, tile: int) -> tirx.PrimFunc:
    """A bucket kernel as added to the module. The kernel and bucket attributes keep
    identical schedules apart (of two buckets, or of two kernels that are one static kernel
    at a bucket), so which kernel and bucket served a call stays observable."""
    return (
        func.without_attr("global_symbol")
        .with_attr("tirx.is_scheduled", True)
        .with_attr("tunefarm.kernel", kernel)
        .with_attr("tunefarm.bucket", bucket)
        .with_attr("tunefarm.tile", tile)
    )


def _model_var(sinfo: relax.TensorType, kernel_shape: list[Any], name: str) -> Any:
    """The model's variable behind the kernel's symbolic dim: the caller-side dim where the
    kernel's is ``name`` (an expression where the caller passes one: not dispatched), the
    variable of the caller's ``c * var`` where the kernel's is ``c * name``; None where the
    kernel has no such dim."""
    for dim, kdim in zip(sinfo.shape.values, kernel_shape, strict=False):
        coef = coefficient(kdim, name)
        if coef == 1:
            return dim
        if coef is not None:
            vars_ = list(dim_vars(dim))
            return vars_[0] if coefficient(dim) == coef and len(vars_) == 1 else dim
    return None


def _axes(shape: Any, name: str) -> list[tuple[int, int]]:
    """(axis, c) of each dim of ``shape`` that is ``c * name``."""
    return [(i, c) for i, d in enumerate(shape) if (c := coefficient(d, name)) is not None]


def _emit_branch(
    builder: relax.BlockBuilder,
    copies: CopyKernels,
    args: list[relax.Expr],
    out_sinfo: relax.TensorType,
    kernel_gv: relax.GlobalVar,
    site: _Site,
    tile: int,
    static: bool = False,
) -> relax.Expr:
    """Emit into ``builder``: pad each input along the site's variable to a multiple of
    ``tile`` (input ``i`` with ``pads[i]``, every axis in one copy), call the padded kernel;
    return its output cropped back to the variable's extent (one copy). A static kernel
    takes inputs padded to exactly ``tile`` (its bucket) and no ``m``; at tile 1 (an exact
    one, called at its bucket alone) the inputs as they are."""
    extent = site.model_var
    if tile == 1 and not static:  # a range kernel of tile 1 runs at any extent: padded too
        found = _on_padded_rows(builder, copies, args, extent, site.plan.free, out_sinfo)
        if found is not None:
            tensors = [a for a in found[0] if isinstance(a.ty, relax.TensorType)]
            out = builder.emit(
                relax.call_tir(kernel_gv, [*tensors, relax.prim_value(found[2])], found[1])
            )
            return copies.crop(out, {i: extent for i in _var_axes(out_sinfo, extent)})
    m = tirx.floordiv(extent + (tile - 1), tile)
    padded = tirx.IntImm("int64", tile) if static else m * tile
    padded_args = []
    for i, (arg, axes, pad) in enumerate(zip(args, site.pad_axes, site.plan.pads, strict=True)):
        if tile > 1 and axes:  # tile 1: nothing to pad
            extents = {axis: padded * c for axis, c in axes}
            # an input whose padding may hold anything takes the tensor a crop was cut
            # from, when that is already padded to these extents (the crop then goes unused)
            uncut = copies.uncropped(builder, arg, extents) if i in site.plan.free else None
            arg = uncut if uncut is not None else copies.pad(builder, arg, extents, pad)
        padded_args.append(arg)
    out_shape = list(out_sinfo.shape.values)
    for axis, c in site.out_axes if tile > 1 else ():  # tile 1: the extent itself
        out_shape[axis] = padded * c
    # neither bucket kernel takes the variable as a scalar, where the generic one does (rows
    # ``c * b``): a static one has constant shapes, a range one ``m`` instead
    padded_args = [a for a in padded_args if isinstance(a.ty, relax.TensorType)]
    call = relax.call_tir(
        kernel_gv,
        padded_args if static else [*padded_args, relax.prim_value(m)],
        relax.TensorType(out_shape, out_sinfo.dtype),
    )
    if tile == 1:
        return call
    # the crop's extent is ``v`` itself, so the next kernel call sees the model's variable
    # and can be dispatched too
    return copies.crop(builder.emit(call), {axis: extent * c for axis, c in site.out_axes})


def _callee(func: relax.Function) -> relax.Function:
    """A function only ever called from the model's own functions, after they checked their
    inputs: ``num_input = 0`` makes TVM's VM shape lowering check only its parameters with
    symbolic dims (which define the variables), not each static weight again. Without it a
    branch call re-checks every parameter (two runtime calls each): 2.4 µs of the 90 µs
    transformer block at s=1, where every kernel is generic, made it 0.97x the untuned build."""
    return func.with_attr("num_input", 0)


def _branch_function(
    bb: relax.BlockBuilder,
    fname: str,
    params: list[relax.Var],
    out_sinfo: relax.TensorType,
    kernel_gv: relax.GlobalVar,
    site: _Site,
    tile: int,
    copies: CopyKernels,
    static: bool = False,
) -> relax.GlobalVar:
    """A private function running one bucket branch (:func:`_emit_branch`) on its params."""
    fparams = [relax.Var(p.name, p.ty) for p in params]
    fb = relax.BlockBuilder()
    with fb.function(fname, fparams, private=True):
        with fb.dataflow():
            out = _emit_branch(fb, copies, list(fparams), out_sinfo, kernel_gv, site, tile, static)
            out = fb.emit_output(out)
        fb.emit_func_output(out)
    return bb.add_func(_callee(fb.get()[fname]), fname)  # may return an identical one


@dataclass(frozen=True)
class _Site:
    """A call site of a dispatched kernel: the caller's variable and the axes along it."""

    plan: _Plan
    model_var: tirx.Var
    pad_axes: list[list[tuple[int, int]]]  # per input: (axis, c) of each dim c * variable
    out_axes: list[tuple[int, int]]


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _site(call: relax.Call, prepared: tvm.IRModule, active: dict[str, _Plan]) -> _Site | None:
    """The dispatch site a ``call_tir`` of an active kernel is (None: keep the generic call)."""
    if not call.op.same_as(_CALL_TIR):
        return None
    name = call.args[0].name_hint
    plan = active.get(name)
    if plan is None or len(call.ty_args) != 1 or len(call.args) > 2:
        return None
    if not isinstance(call.ty_args[0], relax.TensorType):
        return None
    args = list(call.args[1].fields)
    var_name = plan.dispatch.var
    kparams = list(prepared[name].params)
    model_var = None
    for arg, kp in zip(args, kparams, strict=False):
        model_var = _model_var(arg.ty, list(kp.shape), var_name)
        if model_var is not None:
            break
    if model_var is None or not isinstance(model_var, tirx.Var):
        return None  # the caller's dim is an expression: keep the generic kernel
    # a kernel whose buffers hold the variable only in expressions (``c * b``) takes it as a
    # scalar too (a PrimValue argument): no axes
    pad_axes = [_axes(getattr(kp, "shape", None) or (), var_name) for kp in kparams[: len(args)]]
    out_axes = _axes(kparams[len(args)].shape, var_name)
    return _Site(plan, model_var, pad_axes, out_axes) if out_axes else None


def _choice(dispatch: KernelDispatch, value: int | None) -> BucketKernel | None:
    """The kernel the rule runs at ``value`` (None: above every bucket)."""
    if value is not None:
        for upper, bk in dispatch.intervals:
            if value <= upper:
                return bk
    return dispatch.above


# A function is specialized per region of its variables' values (a bisection of ``if``s per
# call of the model) when it has at most this many regions; beyond, each call site dispatches
# on its own. A Hugging Face BERT had 9 (8 was the limit): per-call dispatch doubled its VM
# instructions and cost it 6-19% of its latency (docs/symbolic-shapes.md); with fine range
# variants and static instances it has 30 (the limit was 32).
MAX_REGIONS = 64


def _param_vars(params: list[relax.Var]) -> dict[str, tirx.Var]:
    """The symbolic variables a Relax function's parameters define, by name."""
    out: dict[str, tirx.Var] = {}
    for _, _, dim in param_dims(params):
        if isinstance(dim, tirx.Var):
            out.setdefault(dim.name, dim)
    return out


def _regions(
    func: relax.Function, prepared: tvm.IRModule, active: dict[str, _Plan]
) -> dict[str, list[int | None]] | None:
    """Per variable the function dispatches on, the upper ends of its value regions (None: no
    upper end): every value of a region runs the same kernel at every call site. None when
    the function cannot be specialized (a variable its parameters do not define, too many
    regions) or needs no dispatch."""
    sites: list[_Site] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call):
            site = _site(expr, prepared, active)
            if site is not None:
                sites.append(site)

    relax.analysis.post_order_visit(func.body, visit)
    if not sites:
        return None
    defined = _param_vars(list(func.params))
    cuts: dict[str, set[int]] = {}
    for site in sites:
        var = defined.get(site.model_var.name)
        if var is None or not var.same_as(site.model_var):
            return None
        cuts.setdefault(var.name, set()).update(u for u, _ in site.plan.dispatch.intervals)
    regions = {name: [*sorted(c), None] for name, c in cuts.items()}
    return regions if math.prod(len(r) for r in regions.values()) <= MAX_REGIONS else None


def _specialize(
    bb: relax.BlockBuilder,
    gv: relax.GlobalVar,
    func: relax.Function,
    prepared: tvm.IRModule,
    active: dict[str, _Plan],
    kernel_gvs: dict[str, relax.GlobalVar],
    regions: dict[str, list[int | None]],
    copies: CopyKernels,
) -> relax.Function:
    """``func`` as one ``if`` over the regions of its variables' values, each branch calling
    a copy of ``func`` whose kernel calls are the ones the rule picks in that region (bucket
    kernels inline with their pads and slices, generic kernels as they were). The model pays
    one branch per call; each copy keeps its dataflow block, so its memory is planned as the
    untuned build's is."""
    names = list(regions)
    free_of: dict[str, frozenset[int] | None] = {}

    @relax.expr_functor.mutator
    class _Inline(relax.PyExprMutator):
        def __init__(self, values: dict[str, int | None]) -> None:
            super().__init__()
            self.values = values

        def visit_call_(self, op: relax.Call) -> relax.Expr:
            call = super().visit_call_(op)
            site = _site(call, prepared, active) if isinstance(call, relax.Call) else None
            bk = _choice(site.plan.dispatch, self.values[site.model_var.name]) if site else None
            if site is None or bk is None:  # the generic kernel
                padded = _generic_on_padded(self.builder_, copies, call, prepared, free_of)
                return call if padded is None else padded
            args = list(call.args[1].fields)
            return _emit_branch(
                self.builder_,
                copies,
                args,
                call.ty_args[0],
                kernel_gvs[bk.name],
                site,
                bk.tile,
                bk.static,
            )

    def inline(values: dict[str, int | None]) -> relax.Function:
        body = _Inline(values).visit_expr(relax.utils.copy_with_new_vars(func))
        # one pad of a tensor for all the kernels that pad it alike (BERT's q, k and v
        # projections of one hidden state), then no crop that no kernel reads any more
        body = relax.transform.EliminateCommonSubexpr()(tvm.IRModule({"region": body}))
        return relax.analysis.remove_all_unused(body["region"])

    def region_gv(values: dict[str, int | None]) -> relax.GlobalVar:
        body = inline(values)
        if not _dataflow_scoped(body):
            # a padded tensor handed on across dataflow blocks: build it with every crop
            copies.reuse_padded = False
            try:
                body = inline(values)
            finally:
                copies.reuse_padded = True
        tag = "_".join(
            f"{n}_{'le' + str(v) if v is not None else 'above'}" for n, v in values.items()
        )
        # regions that run the same kernels get one copy (named after the first)
        return bb.add_func(
            _callee(body.without_attr("global_symbol")), f"{gv.name_hint}_dispatch_{tag}"
        )

    combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*regions.values())]
    region_gvs = {tuple(c.values()): region_gv(c) for c in combos}
    params = [relax.Var(p.name, p.ty) for p in func.params]
    defined = _param_vars(params)

    def chain(i: int, values: dict[str, int | None]) -> relax.Expr:
        if i == len(names):
            return relax.Call(region_gvs[tuple(values.values())], params)
        name, var, uppers = names[i], defined[names[i]], regions[names[i]]

        def tree(lo: int, hi: int) -> relax.Expr:
            # regions lo..hi of the variable, by bisection: log2(regions) tests a call
            if lo == hi:
                return _seq(chain(i + 1, {**values, name: uppers[lo]}), func.ret_ty)
            mid = (lo + hi) // 2  # uppers[mid] is a number: only the last region has None
            test = relax.prim_value(var <= uppers[mid])
            return relax.If(test, tree(lo, mid), tree(mid + 1, hi))

        return tree(0, len(uppers) - 1)

    fb = relax.BlockBuilder()
    with fb.function(gv.name_hint, params, attrs=dict(func.attrs) if func.attrs else None):
        out = fb.emit(chain(0, {}))
        fb.emit_func_output(out)
    return fb.get()[gv.name_hint]


def _free_params(
    func: tirx.PrimFunc, cache: dict[str, frozenset[int] | None], name: str
) -> frozenset[int] | None:
    """The positions of ``func``'s inputs whose padding may hold anything
    (:func:`~tuner.symbolic.rangekernel.free_inputs`; None: it has no one symbolic variable
    or cannot be padded), cached by kernel name."""
    if name not in cache:
        found = None
        try:
            norm = normalize(func)["main"]
            var = symbolic_var(norm)
            pads = pad_values(norm, var.name) if var is not None else None
            if var is not None and pads is not None:
                free = free_inputs(norm, var.name, pads)
                found = frozenset(i for i, p in enumerate(norm.params[:-1]) if p.name in free)
        except ScheduleError:  # a kernel written without blocks (GPT-2's cumsum loop)
            found = None
        cache[name] = found
    return cache[name]


def _generic_on_padded(
    builder: relax.BlockBuilder,
    copies: CopyKernels,
    call: relax.Expr,
    prepared: tvm.IRModule,
    cache: dict[str, frozenset[int] | None],
) -> relax.Expr | None:
    """A generic kernel (valid at every extent) run on the padded tensors its inputs were
    cropped from, its output cropped in turn (that crop goes unused where every reader takes
    the padded tensor too): when each input along the variable is such a crop, all padded to
    one extent, and its padding may hold anything for the kernel. None otherwise."""
    if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)) or len(call.args) != 2:
        return None
    out_ty = call.ty_args[0] if len(call.ty_args) == 1 else None
    callee = call.args[0]
    func = prepared.functions.get(callee) if isinstance(callee, relax.GlobalVar) else None
    if not isinstance(out_ty, relax.TensorType) or not isinstance(func, tirx.PrimFunc):
        return None
    args = list(call.args[1].fields)
    if len(func.params) != len(args) + 1 or not all(
        isinstance(a.ty, relax.TensorType) for a in args
    ):
        return None  # a scalar parameter (rows c * b): the kernel reads the variable itself
    var = [d for d in out_ty.shape.values if isinstance(d, tirx.Var)]
    if len({v.name for v in var}) != 1:
        return None
    var = var[0]
    free = _free_params(func, cache, callee.name_hint)
    if free is None:
        return None
    found = _on_padded_rows(builder, copies, args, var, free, out_ty)
    if found is None:
        return None
    new_args, out_ty_padded, _ = found
    out = builder.emit(relax.call_tir(callee, new_args, out_ty_padded))
    return copies.crop(out, {i: var for i in _var_axes(out_ty, var)})


def _var_axes(ty: relax.TensorType, var: tirx.Var) -> list[int]:
    return [i for i, d in enumerate(ty.shape.values) if uses_var(d, var.name)]


def _on_padded_rows(
    builder: relax.BlockBuilder,
    copies: CopyKernels,
    args: list[relax.Expr],
    var: tirx.Var,
    free: frozenset[int],
    out_ty: relax.TensorType,
) -> tuple[list[relax.Expr], relax.TensorType, tvm.ir.PrimExpr] | None:
    """For a kernel valid at every extent of ``var`` (generic code, a range kernel of tile 1):
    its arguments replaced by the padded tensors they were cropped from, its output type at
    that padded extent, and the extent; None unless every input along ``var`` (each dim
    ``var`` itself) is such a crop, all padded to one extent, and in ``free``."""
    extent_of: tvm.ir.PrimExpr | None = None  # the one padded extent of every input
    new_args = []
    for position, arg in enumerate(args):
        axes = _var_axes(arg.ty, var) if isinstance(arg.ty, relax.TensorType) else []
        if not axes:
            new_args.append(arg)
            continue
        if position not in free or any(not arg.ty.shape.values[i].same_as(var) for i in axes):
            return None
        source = copies.padded_source(builder, arg)
        if source is None:
            return None
        extent = extent_of if extent_of is not None else source[1][axes[0]]
        if not padded_to(source, arg, dict.fromkeys(axes, extent)):
            return None
        extent_of = extent
        new_args.append(copies.reopened(builder, source))
    out_axes = _var_axes(out_ty, var)
    if extent_of is None or any(not out_ty.shape.values[i].same_as(var) for i in out_axes):
        return None
    shape = [extent_of if i in out_axes else d for i, d in enumerate(out_ty.shape.values)]
    return new_args, relax.TensorType(shape, out_ty.dtype), extent_of


def _dataflow_scoped(func: relax.Function) -> bool:
    """Whether every dataflow variable ``func`` reads is one its own block defines (the
    check of TVM's well-formedness that handing a padded tensor on could break)."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return True
    for block in body.blocks:
        dataflow = isinstance(block, relax.DataflowBlock)
        defined = {b.var for b in block.bindings} if dataflow else set()
        for binding in block.bindings:
            used = relax.analysis.free_vars(binding.value)
            if any(isinstance(v, relax.DataflowVar) and v not in defined for v in used):
                return False
    return not any(isinstance(v, relax.DataflowVar) for v in relax.analysis.free_vars(body.body))


def add_dispatch(
    prepared: tvm.IRModule,
    target: Any,
    db: TuneFarmDatabase,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> tuple[tvm.IRModule, dict[str, KernelDispatch]]:
    """Add bucket range kernels and dispatch to a prepared module: each Relax function is
    specialized per region of its variables' values (:func:`_specialize`), or, where it cannot
    be, each of its call sites calls a dispatch function of its own. ``traffic``: per model
    variable, observed values and their counts (a shape profile's marginals), which choose
    the kernel above the largest bucket (:attr:`KernelDispatch.above`)."""
    plans: dict[str, _Plan] = {}
    for gv, func in prepared.functions.items():
        if isinstance(func, tirx.PrimFunc) and symbolic_var(func) is not None:
            plans[gv.name_hint] = _plan(gv.name_hint, func, target, db, traffic or {})
        elif isinstance(func, tirx.PrimFunc):
            norm = normalize(func)
            if any(
                not isinstance(d, tirx.IntImm)
                for p in norm["main"].params
                for d in (getattr(p, "shape", None) or ())
            ):
                plans[gv.name_hint] = _Plan(
                    KernelDispatch(gv.name_hint, None, reason="several symbolic variables")
                )
    report = {name: plan.dispatch for name, plan in plans.items()}
    # a kernel whose rule runs the generic kernel at every value keeps its plain call: a
    # dispatch would only add its cost to every call
    active = {name: plan for name, plan in plans.items() if plan.dispatch.used}
    if not active:
        return prepared, report
    bb = relax.BlockBuilder(prepared)
    kernel_gvs = {
        bk.name: bb.add_func(func, bk.name)
        for plan in active.values()
        for bk, func in plan.kernels
        if bk in plan.dispatch.used
    }
    copies = CopyKernels(bb)
    counter = [0]

    def make_dispatch(call: relax.Call) -> relax.Expr | None:
        site = _site(call, prepared, active)
        if site is None:
            return None
        name, plan = call.args[0].name_hint, site.plan
        out_sinfo = call.ty_args[0]
        args = list(call.args[1].fields)
        counter[0] += 1
        tag = f"{name}_dispatch{counter[0]}"
        params = [relax.Var(f"a{i}", a.ty) for i, a in enumerate(args)]
        by_name = {
            bk.name: _branch_function(
                bb,
                f"{tag}_{bk.name[len(name) + 1 :]}",
                params,
                out_sinfo,
                kernel_gvs[bk.name],
                site,
                bk.tile,
                copies,
                bk.static,
            )
            for bk in plan.dispatch.used
        }
        fparams = [relax.Var(p.name, p.ty) for p in params]
        generic = relax.call_tir(call.args[0], fparams, out_sinfo)
        above = plan.dispatch.above
        body: relax.Expr = generic if above is None else relax.Call(by_name[above.name], fparams)
        for upper, bk in reversed(plan.dispatch.intervals):
            chosen = generic if bk is None else relax.Call(by_name[bk.name], fparams)
            cond = relax.prim_value(site.model_var <= upper)
            body = relax.If(cond, _seq(chosen, out_sinfo), _seq(body, out_sinfo))
        fb = relax.BlockBuilder()
        with fb.function(tag, fparams, private=True):
            out = fb.emit(body)
            fb.emit_func_output(out)
        return relax.Call(bb.add_func(_callee(fb.get()[tag]), tag), args)

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        def visit_call_(self, op: relax.Call) -> relax.Expr:
            call = super().visit_call_(op)
            if isinstance(call, relax.Call):
                new = make_dispatch(call)
                if new is not None:
                    return new
            return call

    rewriter = _Rewriter(bb.get())
    specialized: dict[relax.GlobalVar, relax.Function] = {}
    for gv, func in list(bb.get().functions.items()):
        if isinstance(func, relax.Function) and "_dispatch" not in gv.name_hint:
            if func.attrs is None or "global_symbol" not in func.attrs:
                continue
            regions = _regions(func, prepared, active)
            if regions is not None:
                specialized[gv] = _specialize(
                    bb, gv, func, prepared, active, kernel_gvs, regions, copies
                )
            else:
                bb.update_func(gv, rewriter.visit_expr(func))
    mod = bb.finalize()
    for gv, func in specialized.items():
        mod[gv] = func
    return relax.transform.Normalize()(mod), report


def _seq(expr: relax.Expr, sinfo: relax.Type) -> relax.SeqExpr:
    var = relax.Var("r", sinfo)
    return relax.SeqExpr([relax.BindingBlock([relax.VarBinding(var, expr)])], var)
