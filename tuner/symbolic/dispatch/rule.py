"""The dispatch rule: which kernel serves a value of a symbolic kernel's variable (the
generic kernel or a bucket's static, exact or range kernel), by each one's estimated time,
the padded branch's own cost included (see :mod:`tuner.symbolic.dispatch`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from database.evidence import Evidence

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
    # the evidence of the bucket's best schedule it is made from (database.evidence)
    evidence: Evidence | None = field(default=None, compare=False, repr=False)

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
    recorded (the untuned default is measured by every tune), costs its time at ``v`` where
    ``v`` is such a bucket, else the least, over the buckets ``B >= v``, of its time at ``B``
    scaled by the work at ``v`` (it pads nothing).
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
        at_v = [t for b, t in generic if b == v]
        above = [(b, t) for b, t in generic if b >= v] or list(generic[-1:])
        # measured at v itself: that time, not another bucket's scaled down (a decode step's
        # k/v projection, memory-bound, ran 118 us generic at prompt 1, where its time at 256
        # scaled by 1/256 said 20 us and took it from the 22 us kernel tuned at 1)
        cost = at_v[0] if at_v else min(sec * (v / value) ** degree for value, sec in above)
        if cost <= GENERIC_MARGIN * best.cost(v, degree, buffers):
            return None
    return best


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
