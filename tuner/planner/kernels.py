"""What the planner knows of each task and kernel: measured defaults and bests, the
curve each follows, the values each bucket serves."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import tvm

from tuner.planner.curves import (
    CONTRACTION_SEARCH,
    GENERIC_CALL_SEC,
    PRIOR_BYTES_PER_SEC,
    PRIOR_FLOOR,
    PRIOR_GFLOPS,
    PRIOR_MIN_SEC,
    PRIOR_TAU,
    SEARCH_SPREAD,
    GainCurve,
    tail_ratio,
)
from tuner.symbolic.dispatch.rule import BucketKernel, PadBuffer, offers_variant
from tuner.symbolic.rangekernel import instance_points


# ---------------------------------------------------------------------- what is known
@dataclass
class TaskModel:
    """One (kernel, bucket) task: what the database knows and the curve it follows."""

    name: str  # the symbolic kernel's name (or the static kernel's)
    value: int | None  # the bucket (None: a kernel that does not depend on the variable)
    calls: int
    mod: tvm.IRModule
    flops: float | None
    recorded: int = 0
    best_sec: float | None = None
    default_sec: float | None = None  # measured
    default_est: float = 0.0  # measured or estimated
    default_source: str = "measured"
    # the symbolic kernel's generic code measured at this bucket (None: never measured)
    generic_sec: float | None = None
    curve: GainCurve = field(default_factory=lambda: GainCurve(PRIOR_FLOOR, PRIOR_TAU, "prior"))
    # the range kernel's tile, from the record (None: unknown; 0: it does not transplant)
    tile: int | None = None
    # the fine variant's smaller tile (rangekernel.range_variants; None: no fine variant)
    fine_tile: int | None = None
    # the range kernel's and its fine variant's times as the build prices them (the tune's
    # probe at the bucket, relative to the static kernel timed beside it), over the static
    # kernel's (None: never timed; the kernel's other buckets' ratio is used, else 1)
    range_ratio: float | None = None
    fine_ratio: float | None = None
    floor_sec: float = 0.0  # its buffers' bytes at PRIOR_BYTES_PER_SEC
    # its best record is the default schedule: the build offers its static kernel only
    default_won: bool = False
    # the generic code's time here scaled from another bucket's measured one (None: none)
    generic_guess: float | None = None
    cls: str = "contraction"  # its kernel class (rangekernel.kernel_class)

    def __post_init__(self) -> None:
        self.floor_sec = _bytes(self.mod) / PRIOR_BYTES_PER_SEC

    @property
    def generic_est(self) -> float:
        """The generic kernel's time at this bucket: measured, else the default's (the
        rule's estimate for databases without generic times)."""
        if self.generic_sec is not None:
            return self.generic_sec
        return self.default_est if self.generic_guess is None else self.generic_guess

    def spread(self, t: int) -> float:
        """The sd of log(best) of the search ``t`` records would run (0: none to run, or
        one already ran: its best is measured; a contraction's by the search's length,
        :data:`CONTRACTION_SEARCH`, the others' :data:`SEARCH_SPREAD`)."""
        if t < 2 or self.recorded >= 2:
            return 0.0
        if self.cls in SEARCH_SPREAD:
            return SEARCH_SPREAD[self.cls]
        return CONTRACTION_SEARCH.spread(t)

    def time(self, t: int) -> float:
        """Predicted best time after ``t`` records in all (0: untuned, the default)."""
        if t <= 0:
            return self.default_est
        if self.best_sec is not None and self.recorded >= 1:
            reached = self.best_sec / self.default_est if self.default_est else 1.0
            if self.recorded >= 2 and reached <= self.curve.ratio(self.recorded):
                # at or ahead of its curve: the jump is behind it, its search goes on
                ratio = tail_ratio(self.cls, self.recorded, t)
            else:
                ratio = self.curve.ratio(max(t, self.recorded)) / self.curve.ratio(self.recorded)
            return min(self.best_sec, max(self.best_sec * ratio, self.floor_sec))
        return min(self.default_est, max(self.default_est * self.curve.ratio(t), self.floor_sec))


@dataclass
class KernelModel:
    """One symbolic kernel of the model and its tasks at the candidate buckets."""

    name: str
    calls: int
    degree: int = 1
    buffers: tuple[PadBuffer, ...] = ()
    reason: str | None = None  # why the dispatch never runs a bucket kernel for it
    at: dict[int, TaskModel] = field(default_factory=dict)

    def generic(self, v: int) -> float:
        """The generic (untuned) kernel's time at ``v``: the least over buckets ``B >= v``
        of ``generic(B) * (v / B) ** d`` (the rule's estimate), over every candidate."""
        known = sorted((b, t.generic_est) for b, t in self.at.items())
        above = [(b, s) for b, s in known if b >= v] or known[-1:]
        # a call costs at least its launch, whatever the size (measured: layer norm's
        # generic code at s=24 took 8.4 us where (24/56) of its 15.5 us at 56 is 6.6)
        return min(
            min(s, GENERIC_CALL_SEC) + max(s - GENERIC_CALL_SEC, 0.0) * (v / b) ** self.degree
            for b, s in above
        )

    def range_ratios(self, bucket: int) -> tuple[float, float]:
        """The range kernel's and its fine variant's time over the static kernel's at
        ``bucket``: as the tune measured them there, else the median over the buckets where
        it did (a bucket not tuned yet), else 1."""

        def ratio(attr: str) -> float:
            own = getattr(self.at[bucket], attr) if bucket in self.at else None
            if own is not None:
                return own
            seen = [r for t in self.at.values() if (r := getattr(t, attr)) is not None]
            return statistics.median(seen) if seen else 1.0

        return ratio("range_ratio"), ratio("fine_ratio")

    def dispatch(
        self, trials: dict[int, int]
    ) -> tuple[list[BucketKernel], list[tuple[int, float]]]:
        """The bucket kernels the build offers the dispatch with ``trials`` per bucket, each
        priced as the build prices it, and the generic kernel's time at each bucket."""
        kernels, generic = [], []
        lower = 0  # the bucket below
        for b in sorted(trials):
            t = trials[b]
            if t < 1 or self.reason:
                continue
            tm = self.at[b]
            sec = tm.time(t)
            range_ratio, fine_ratio = self.range_ratios(b)
            generic.append((b, tm.generic_est))
            tile = tm.tile or _prior_tile(b)  # tm.tile 0: the record does not transplant
            # the default schedule won and no new trial may change that: as the build, no
            # range kernel and no instances (matmul2 of the transformer block then ran its
            # generic code above the bucket, 8.2 ms at s=236, where the model had a range
            # kernel at 0.25 ms)
            transplants = tm.tile != 0 and not (tm.default_won and t <= tm.recorded)
            # each variant offered and priced as the build does: the range kernel where the
            # tune timed it at this bucket or the tile-1 rule lets the static kernel's time
            # stand for it, at its measured ratio to the static kernel's time (the MLP's
            # 192-kernel's fine variant priced at the static kernel's time won every value
            # from 20 to 150 in the model, where the build, by its measured time, gave it
            # one of six)
            if transplants and offers_variant(tm.range_ratio is not None, False, tile, self.degree):
                kernels.append(BucketKernel(b, tile, f"{self.name}{b}", "", sec * range_ratio))
            # a fine variant only with its own time, as the build: timed in the database, or
            # to be timed by the tune of ``t`` trials (it times the best record's variants
            # after the search); a bucket not tuned yet has no fine tile
            fine_timed = tm.fine_ratio is not None or t > tm.recorded
            if (
                transplants
                and tm.fine_tile
                and offers_variant(fine_timed, True, tm.fine_tile, self.degree)
            ):
                # its fine variant: a value far below the bucket pads to the register tile only
                # (the MLP's 200-kernel, tile 100, served b = 6 at 19 us where padding to 100
                # was priced 284 us)
                fine = BucketKernel(b, tm.fine_tile, f"{self.name}{b}_fine", "", sec * fine_ratio)
                kernels.append(fine)
            kernels.append(BucketKernel(b, b, f"{self.name}{b}_s", "", sec, static=True))
            if b > 1:  # the same at its bucket, unpadded (the build's exact kernel)
                kernels.append(BucketKernel(b, 1, f"{self.name}{b}_x", "", sec, static=True))
            for at in instance_points(lower, b) if transplants else ():
                if at % tile == 0:  # the build's static instances between the buckets
                    scaled = sec * (at / b) ** self.degree
                    name = f"{self.name}{b}_at{at}"
                    kernels.append(BucketKernel(at, at, name, "", scaled, static=True, origin=b))
                    kernels.append(
                        BucketKernel(at, 1, f"{name}_x", "", scaled, static=True, origin=b)
                    )
            lower = b
        return kernels, generic


def nearest(
    measured: dict[int, TaskModel], b: int, tm: TaskModel, degree: int
) -> tuple[int, TaskModel, float]:
    """The bucket of ``measured`` nearest ``b`` (in ratio), its task, and the factor that
    scales a time there to ``tm``'s at ``b``: by FLOPs, else by ``(b / near) ** degree``."""
    near = min(measured, key=lambda m: abs(math.log(m / b)))
    ref = measured[near]
    scale = tm.flops / ref.flops if ref.flops and tm.flops else (b / near) ** degree
    return near, ref, scale


def top_bucket(trials: dict[int, int]) -> int:
    """The largest bucket given at least one trial (0: none)."""
    return max((b for b, t in trials.items() if t >= 1), default=0)


def _prior_tile(value: int) -> int:
    """A range kernel's tile where no record says: the largest power of two dividing the
    bucket, at most 16 (the tiles tuned kernels of the examples have: 1 to 32)."""
    tile = 1
    while value % (tile * 2) == 0 and tile < 16:
        tile *= 2
    return tile


def prior_default(tm: TaskModel) -> float:
    """An untuned default never measured: its FLOPs at :data:`PRIOR_GFLOPS`, plus
    :data:`PRIOR_MIN_SEC`, never below its bytes' floor."""
    return max((tm.flops or 0.0) / (PRIOR_GFLOPS * 1e9), tm.floor_sec) + PRIOR_MIN_SEC


def _bytes(mod: tvm.IRModule) -> float:
    """Bytes of a static task's buffers (its inputs and output)."""
    from tvm import tirx

    total = 0.0
    for param in mod["main"].params:
        shape = list(getattr(param, "shape", None) or ())
        if shape and all(isinstance(d, tirx.IntImm) for d in shape):
            bits = tvm.runtime.DataType(str(param.dtype)).bits
            total += math.prod(int(d) for d in shape) * bits / 8
    return total
