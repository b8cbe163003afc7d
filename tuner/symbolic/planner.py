"""Buckets from traffic: choose the bucket set and the trial split that minimise the expected
latency of the whole model over a shape profile (``tunefarm plan``).

The model (documented in docs/symbolic-shapes.md, "Buckets from traffic"):

- **Latency at a value** ``v`` is the sum over the model's kernels of ``calls x time``. A
  symbolic kernel's time at ``v`` is what the build's dispatch rule (:mod:`tuner.symbolic.dispatch`)
  would run there: its own cost model (:meth:`BucketKernel.cost` with the padding overhead,
  :data:`GENERIC_MARGIN`, :attr:`KernelDispatch.above`) applied to *predicted* bucket
  kernels, a static, an exact and a range kernel per bucket. The generic kernel's time at
  ``v`` is its generic code's time measured at each bucket (``generic_runs``; else the
  untuned default's there), scaled as the rule scales it (the least over buckets ``B >= v``
  of ``generic(B) * (v / B) ** d``). Kernels the rule never dispatches (several variables,
  no pad value) cost their generic time whatever the buckets.
- **A task's time after t trials** (``t`` counts every record of the task, its default
  schedule included): ``default * rho(t)``, ``rho(0) = 1`` (untuned). A kernel family with
  tuning histories in the database follows its own measured curve (:func:`family_curve`:
  the median over its buckets of best / default after each record, then as below);
  else its kernel class's (:func:`~tuner.symbolic.rangekernel.kernel_class`)
  ``rho(t) = floor + (1 - floor) * exp(-(t - 1) / tau)``, ``tau`` fitted to the class's
  histories (least squares over a grid; at least :data:`PRIOR_TAU`), ``floor`` the task's
  roofline over its default (at least :data:`PRIOR_CLASS_FLOOR` for reductions and
  injective kernels); a contraction at least :data:`JUMP_MIN` x off its roofline jumps:
  ``rho(t) = floor * R(t)`` from its second trial, ``R`` the mean of how far a
  contraction's search of ``t`` records still is from its end (:data:`CONTRACTION_SEARCH`,
  measured: 6.7x after 2 records, 1.8x after 8, 1.1x after 16; :attr:`GainCurve.log`). A
  task with records is anchored to its measured best: ``best * rho(t) / rho(recorded)``,
  or, at or below its curve already (the jump is behind it), ``best`` times what its search
  still expects (:func:`tail_ratio`: a contraction's median ``R(t) / R(recorded)``, the
  others' :data:`TAIL_CURVES`). A default not measured at a bucket is the
  family's nearest measured default scaled by FLOPs (else by ``(B / B') ** d``), else FLOPs
  at :data:`PRIOR_GFLOPS`; generic code likewise from its nearest measured bucket.
- **Several searches**: where the kernels of two or more buckets can serve a value and a
  search among them is still to run, the value costs the expected fastest of them, each
  bucket's outcome a lognormal factor of mean 1 (a contraction's sd by its search's length,
  1.25 after 2 records, 0.33 after 16, :data:`CONTRACTION_SEARCH`; :data:`SEARCH_SPREAD`;
  :meth:`Planner._best_of`): the dispatch runs whichever search came out best.
- **Expected latency** is the traffic-weighted mean over the profile's values (at most
  :data:`MAX_VALUES` representatives, :meth:`ShapeProfile.representatives`).
- **Search.** Candidate buckets: the profile's quantiles rounded up to a tileable value
  (a power of two up to 8, else a multiple of 8), the buckets the database already has, and
  powers of two over the profile's range (at most :data:`MAX_CANDIDATES`). Bucket sets grow
  greedily (the candidate that lowers the expected latency most, up to :data:`MAX_BUCKETS`),
  then single swaps are tried until none helps. For each set the trials are split greedily:
  every task gets its default schedule (one trial) or keeps its records, then each further
  trial goes to the task whose predicted time, weighted by the traffic its kernel serves
  (calls x share x work scale), drops most; twice, the second time with the dispatch
  re-derived from the first split's predicted times.

- **Calibration** (a re-plan between stages, :class:`Calibration`): the database's build timed
  at some of the profile's values, each built kernel alone too; the model's kernels are
  scaled by measured / modelled, kernel by kernel, and the call's time outside its kernels
  is added; the re-plan's search and figures both use it.

Limits: one symbolic variable per model (the dispatch itself serves kernels of one variable);
the curve is per family, not per bucket; without a calibration, VM and dispatch overheads
outside the kernels are not modelled (the plan is kernel time).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import tvm

from database import TuneFarmDatabase, shash_of
from tuner.errors import TuneFarmError
from tuner.pipeline import extract_tasks, prepare
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, symbolic_vars, upper_bounds
from tuner.symbolic.dispatch import (
    BucketKernel,
    KernelDispatch,
    PadBuffer,
    bucket_workloads,
    choose_intervals,
    offers_variant,
    pad_buffers,
)
from tuner.symbolic.profile import ShapeProfile
from tuner.symbolic.rangekernel import instance_points

PRIOR_FLOOR = 0.2  # without histories: tuning ends at 5x faster than the default schedule
# ... unless the kernel's roofline says otherwise: a kernel of no family with histories ends
# at max(FLOPs at this rate, bytes at PRIOR_BYTES_PER_SEC) (the examples' tuned matmuls ran
# at 200-230 GFLOPS on the 2-core VM; half of that)
PRIOR_TUNED_GFLOPS = 100.0
PRIOR_TAU = 8.0  # ... reaching 63% of that gain in 8 trials
# ... except a contraction whose default is at least JUMP_MIN x its roofline (a naive loop
# nest): it jumps at its second trial (Hugging Face GPT-2, 17 matmul families, 64 trials
# each: best / default 1.0, 0.027, 0.019, 0.018 at trials 1-4, 0.013 at 32), then closes in
# on its floor as a contraction's search does (:data:`CONTRACTION_SEARCH`, GainCurve.log).
JUMP_MIN = 10.0
# ... except for kernels without a contraction, whose untuned code is not far off: measured
# on the transformer block (2-core Xeon, 12-100 trials a task), layer norm ended at 0.39-0.97
# of its default, softmax at 0.51-1.0, transposes at 1.0 (docs/symbolic-shapes.md)
PRIOR_CLASS_FLOOR = {"reduction": 0.45, "injective": 0.8}
PRIOR_GFLOPS = 2.0  # an untuned default's throughput when no default was ever measured
PRIOR_MIN_SEC = 2e-6  # ... plus this per call
PRIOR_LAUNCH_SEC = 1e-6  # a tuned kernel's call costs at least its roofline plus this
GENERIC_CALL_SEC = 2e-6  # a generic kernel's time that does not scale with the work
# No kernel, tuned or not, runs faster than reading and writing its buffers once at this
# rate (a roofline floor: an x[1, 256] @ W[256, 512] streams its 512 KB weight whatever the
# schedule; measured on the 2-core VM, the MLP's b=1 kernels ran at about 30 GB/s).
PRIOR_BYTES_PER_SEC = 20e9
# How far one search's outcome strays from the curve, as the sd of log(best), for kernels
# without a contraction (a contraction's: :data:`CONTRACTION_SEARCH`, by its length). They
# gain 2x at most from tuning: their searches differ far less (not measured: a guess at a
# fifth of a long contraction search's). The curve predicts the mean outcome; where the
# buckets of several searches can serve a value, the dispatch runs whichever came out
# fastest, and the expected least of them is below each one's mean (:meth:`Planner._best_of`).
# The kernel classes whose searches are not a contraction's (:data:`CONTRACTION_SEARCH`):
# each has its own spread (here) and slow tail (:data:`TAIL_CURVES`).
NON_CONTRACTION = ("reduction", "injective")
SEARCH_SPREAD = dict.fromkeys(NON_CONTRACTION, 0.05)
SPREAD_SAMPLES = 64  # stratified draws per search for the expected least
EVEN_FLOOR = 8  # trials per task the first split's weights assume at least (see split)
MAX_CANDIDATES = 10
MAX_BUCKETS = 4
MAX_VALUES = 48
_TAUS = (2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)
# A history's floor is never put below this fraction of the best ratio it reached: a short
# history whose second record jumped (default 80 ms, then 1 ms) fits floor -> 0, tau -> 0,
# which would promise unbounded gains from more trials.
FLOOR_OF_REACHED = 0.5


# ---------------------------------------------------------------------- the gain curve
@dataclass(frozen=True)
class SearchResidual:
    """How far a contraction's search is from where it ends, by its length ``t`` (records,
    the default schedule included): the best so far over the best the search reaches, a
    lognormal of median ``at2 ** exp(-(t - 2) / tau)`` and sd of log
    ``sd2 * exp(-(t - 2) / sd_tau)`` (its mean: the median times ``exp(sd ** 2 / 2)``).

    Fitted to the MLP (``tune examples/mlp_dynamic.py --shape b=32,40,56 --trials 96``, seeds
    0-4, 2-vCPU AMD EPYC; 30 task histories of 10-16 records, each best-so-far over the best
    any seed reached for that task): median 3.05x after 2 records, 1.92x after 4, 1.58x
    after 8, 1.17x after 12, 1.05x after 16 (this median: 3.05, 2.11, 1.40, 1.16, 1.07);
    means 6.67x, 3.00x, 1.82x, 1.43x, 1.11x (this mean: 6.67, 3.59, 1.79, 1.30, 1.13); the
    sd from mean / median, 1.25 after 2 records, 0.94 after 4, 0.53 after 8, 0.33 after 16
    (and 0.19-0.36 over 5 seeds of a 48-trial job after 16). A short search is far from its
    end and far from the next seed's."""

    at2: float = 3.05
    tau: float = 5.0
    sd2: float = 1.25
    sd_tau: float = 10.5

    def median(self, t: float) -> float:
        """The median best after ``t`` records over the search's end (``t < 2``: as 2)."""
        return self.at2 ** math.exp(-(max(t, 2.0) - 2.0) / self.tau)

    def spread(self, t: float) -> float:
        """The sd of log(best) after ``t`` records (``t < 2``: as 2)."""
        return self.sd2 * math.exp(-(max(t, 2.0) - 2.0) / self.sd_tau)

    def mean(self, t: float) -> float:
        """The mean best after ``t`` records over the search's end."""
        return self.median(t) * math.exp(self.spread(t) ** 2 / 2.0)

    def ahead(self, recorded: int, t: float) -> float:
        """What a search at ``recorded`` records expects its best to become after ``t``:
        the ratio of the medians (1 for ``t <= recorded``)."""
        return self.median(max(t, recorded)) / self.median(recorded)


CONTRACTION_SEARCH = SearchResidual()


@dataclass(frozen=True)
class GainCurve:
    """Predicted best / default after ``t`` trials (the default schedule is trial 1):
    ``floor + (1 - floor) * exp(-(t - 1) / tau)``, or where ``points`` are given (a kernel
    family's measured best / default after each trial), those, then from the last of them
    what a task of kernel class ``tail`` past its jump expects (:func:`tail_ratio`)."""

    floor: float
    tau: float
    source: str
    points: tuple[float, ...] = ()
    tail: str = "contraction"  # the kernel class whose tail continues the points
    # the jump of a contraction far from its roofline: from the second trial, its floor
    # times the mean of :data:`CONTRACTION_SEARCH` (most of the speed-up, in orders of
    # magnitude, at the second trial; the rest as a contraction's search closes in)
    log: bool = False

    def ratio(self, t: float) -> float:
        if t < 1:
            return 1.0
        if self.log:
            return 1.0 if t < 2 else min(1.0, self.floor * CONTRACTION_SEARCH.mean(t))
        if self.points:
            n = len(self.points)
            if t <= n:
                return self.points[max(round(t), 1) - 1]
            return self.points[-1] * tail_ratio(self.tail, n, t)
        return self.floor + (1.0 - self.floor) * math.exp(-(t - 1) / self.tau)


# A task at or below its curve has made its jump; what is left comes slowly. Measured there
# (the same runs): matmuls 1.5-2.6x more over the next 15-28 trials (a contraction's search
# goes on as :data:`CONTRACTION_SEARCH`, by its length), softmax and layer norm 1.03-1.05x:
# from its best, at most this much more, reaching 63% of it in 16 trials.
TAIL_CURVES = {cls: GainCurve(0.9, 16.0, "tail") for cls in NON_CONTRACTION}


def tail_ratio(cls: str, recorded: int, t: float) -> float:
    """What a task of kernel class ``cls`` past its jump, at ``recorded`` records, expects
    its best to become after ``t`` records (a ratio to its best): a contraction's search
    goes on closing in (:meth:`SearchResidual.ahead`), the others follow their slow tail."""
    if cls not in NON_CONTRACTION:
        return CONTRACTION_SEARCH.ahead(recorded, t)
    return TAIL_CURVES[cls].ratio(max(t, recorded) - recorded + 1)


def _histories(
    db: TuneFarmDatabase, target: tvm.target.Target
) -> list[tuple[str, str, list[float]]]:
    """Per workload with a measured default and 4+ records on ``target``: (family shash or
    "", kernel class (:func:`~tuner.symbolic.rangekernel.kernel_class`), best-so-far /
    default after each record, in recording order)."""
    from database import TargetKey
    from database.training import record_histories, workload_mods

    rows = record_histories(db.storage, TargetKey.of(target).key)
    by_wl: dict[int, tuple[str, list[tuple[bool, float | None]]]] = {}
    for wid, family, is_default, mean in rows:
        by_wl.setdefault(wid, (family or "", []))[1].append((bool(is_default), mean))
    kept: dict[int, tuple[str, list[float]]] = {}
    for wid, (family, recs) in by_wl.items():
        default = next((m for d, m in recs if d and m), None)
        if default is None or len(recs) < 4:
            continue
        best, ratios = math.inf, []
        for _, mean in recs:
            if mean is not None and mean > 0:
                best = min(best, mean)
            ratios.append(min(best / default, 1.0) if best < math.inf else 1.0)
        kept[wid] = (family, ratios)
    # one class per family (its buckets share the structure), else per workload
    first: dict[str, int] = {}
    for wid, (family, _) in kept.items():
        first.setdefault(family or f"#{wid}", wid)
    mods = workload_mods(db.storage, list(first.values())) if first else {}
    cls_of = {key: _class_of_json(mods.get(wid)) for key, wid in first.items()}
    return [(fam, cls_of[fam or f"#{wid}"], ratios) for wid, (fam, ratios) in kept.items()]


def _class_of_json(mod_json: str | None) -> str:
    """The kernel class of a stored workload (``contraction`` when it cannot be read)."""
    from tuner.symbolic.rangekernel import kernel_class

    if not mod_json:
        return "contraction"
    try:
        return kernel_class(tvm.ir.load_json(mod_json)["main"])
    except Exception:
        return "contraction"


def _floor_given(tau: float, ratios: list[float]) -> float:
    """Least-squares floor of one history for a given tau (closed form), clipped."""
    num = den = 0.0
    for i, r in enumerate(ratios, 1):
        e = math.exp(-(i - 1) / tau)
        num += (r - e) * (1 - e)
        den += (1 - e) ** 2
    reached = FLOOR_OF_REACHED * min(ratios)
    return min(1.0, max(0.005, reached, num / den)) if den > 0 else 1.0


def _fit(hist: list[list[float]]) -> tuple[float, list[float]]:
    """The tau that fits ``hist`` best (least squares over :data:`_TAUS`) and each
    history's floor at that tau."""

    def sse(tau: float) -> float:
        total = 0.0
        for ratios in hist:
            f = _floor_given(tau, ratios)
            total += sum(
                (r - (f + (1 - f) * math.exp(-(i - 1) / tau))) ** 2 for i, r in enumerate(ratios, 1)
            )
        return total

    tau = min(_TAUS, key=sse)
    return tau, [_floor_given(tau, ratios) for ratios in hist]


@dataclass(frozen=True)
class Curves:
    """The gain curves the database's histories give: over all of them (reported), per
    kernel class and per kernel family."""

    overall: GainCurve
    by_class: dict[str, GainCurve]
    by_family: dict[str, GainCurve]

    def for_task(self, family: str | None, cls: str) -> GainCurve:
        """A task's curve: its family's, else its class's, else its class's prior."""
        if family and family in self.by_family:
            return self.by_family[family]
        if cls in self.by_class:
            return self.by_class[cls]
        return GainCurve(PRIOR_CLASS_FLOOR.get(cls, PRIOR_FLOOR), PRIOR_TAU, f"{cls} prior")


def fit_curves(db: TuneFarmDatabase, target: tvm.target.Target) -> Curves:
    """The curves of the database's histories (see module docstring). Families and classes
    get their own tau and floor: a matmul whose default ran 100x off its tuned speed jumps
    in two trials, a softmax a few trials in gains 2x at most."""
    hist = _histories(db, target)
    if not hist:
        prior = GainCurve(PRIOR_FLOOR, PRIOR_TAU, "no tuning history: tau prior, floor per task")
        return Curves(prior, {}, {})
    tau, floors = _fit([r for _, _, r in hist])
    overall = GainCurve(statistics.median(floors), tau, f"fitted to {len(hist)} histories")
    by_class: dict[str, GainCurve] = {}
    for cls in sorted({c for _, c, _ in hist}):
        ratios = [r for _, c, r in hist if c == cls]
        ctau, cfloors = _fit(ratios)
        by_class[cls] = GainCurve(
            statistics.median(cfloors), ctau, f"{cls}, {len(ratios)} histories"
        )
    by_family: dict[str, GainCurve] = {}
    for fam in sorted({f for f, _, _ in hist if f}):
        ratios = [r for f, _, r in hist if f == fam]
        cls = next(c for f, c, _ in hist if f == fam)
        by_family[fam] = family_curve(ratios, cls, f"family, {len(ratios)} histories")
    return Curves(overall, by_class, by_family)


def family_curve(histories: list[list[float]], cls: str, source: str) -> GainCurve:
    """A kernel family's own curve: at each trial count, the median over its histories
    (buckets) of best / default, each history continued past its end as a task of class
    ``cls`` past its jump goes on (:func:`tail_ratio`); then the same from there. A new
    bucket of the family is expected to go as its others went (the exponential fitted to
    them promised a new bucket 2x better than any had reached)."""
    n = max(len(h) for h in histories)
    extended = [
        [*h, *(h[-1] * tail_ratio(cls, len(h), t) for t in range(len(h) + 1, n + 1))]
        for h in histories
    ]
    points = tuple(statistics.median(h[i] for h in extended) for i in range(n))
    # a curve of points never reads its tau (the planner's roofline pass skips families too)
    return GainCurve(points[-1], PRIOR_TAU, source, points=points, tail=cls)


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


def _nearest(
    measured: dict[int, TaskModel], b: int, tm: TaskModel, degree: int
) -> tuple[int, TaskModel, float]:
    """The bucket of ``measured`` nearest ``b`` (in ratio), its task, and the factor that
    scales a time there to ``tm``'s at ``b``: by FLOPs, else by ``(b / near) ** degree``."""
    near = min(measured, key=lambda m: abs(math.log(m / b)))
    ref = measured[near]
    scale = tm.flops / ref.flops if ref.flops and tm.flops else (b / near) ** degree
    return near, ref, scale


def _top_bucket(trials: dict[int, int]) -> int:
    """The largest bucket given at least one trial (0: none)."""
    return max((b for b, t in trials.items() if t >= 1), default=0)


def _prior_tile(value: int) -> int:
    """A range kernel's tile where no record says: the largest power of two dividing the
    bucket, at most 16 (the tiles tuned kernels of the examples have: 1 to 32)."""
    tile = 1
    while value % (tile * 2) == 0 and tile < 16:
        tile *= 2
    return tile


# ---------------------------------------------------------------------- the plan
def tileable(v: int, bound: int | None) -> int:
    """``v`` rounded up to a tileable bucket: a power of two up to 8, else a multiple of 8;
    within ``bound`` (the model's upper bound of the variable, if any)."""
    out = 1 << (v - 1).bit_length() if v <= 8 else -(-v // 8) * 8
    return min(out, bound) if bound else out


def powers_of_two(values: Iterable[int], bound: int | None) -> list[int]:
    """Powers of two over the range of ``values`` (the one above the largest included),
    within ``bound``: the planner's alternative to its own buckets."""
    values = list(values)
    top, low = tileable(max(values), bound), min(values) // 2
    out, p = [], 1
    while True:
        if (bound is None or p <= bound) and p >= low:
            out.append(p)
        if p >= top or (bound is not None and p >= bound):
            return out
        p *= 2


@dataclass(frozen=True)
class PlannedTask:
    name: str  # the job's task name (``fused_matmul_add[s=64]``)
    kernel: str
    bucket: int | None
    calls: int
    recorded: int
    trials: int  # records it should have after the job
    before_sec: float | None  # its best time now (None: never measured)
    after_sec: float  # predicted after ``trials``
    serves: float  # share of traffic whose calls of the kernel it runs
    why: str


@dataclass(frozen=True)
class BucketRow:
    """Values up to ``value`` (above the previous bucket; None: above every bucket)."""

    value: int | None
    share: float
    untuned_sec: float
    before_sec: float
    after_sec: float


@dataclass(frozen=True)
class Plan:
    var: str
    buckets: tuple[int, ...]
    budget: int
    tasks: tuple[PlannedTask, ...]
    rows: tuple[BucketRow, ...]
    untuned_sec: float  # expected latency, untuned build
    before_sec: float  # with what the database has now
    after_sec: float  # predicted after the plan
    curve: GainCurve
    alternatives: tuple[tuple[str, float | None], ...] = ()
    notes: tuple[str, ...] = ()
    # the built module timed between stages: the plan was made with it, and before and after
    # are calibrated by it (untuned is not: another module); kernel_after_sec: the same
    # plan's kernel-time figure
    calibration: Calibration | None = None
    kernel_after_sec: float | None = None

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    def task_trials(self) -> tuple[tuple[str, int], ...]:
        return tuple((t.name, t.trials) for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["trials"] = self.trials
        out["alternatives"] = dict(self.alternatives)
        return out


Chosen = dict[str, dict[int, int]]  # kernel -> bucket -> trials


@dataclass(frozen=True)
class Calibration:
    """The database's build timed at some of the profile's values (``values``): the whole
    call (``measured_sec``) and each kernel alone (:mod:`tuner.kernel_profile`), against the
    kernel-time model of the same database. What it corrects, kernel by kernel:

    - ``generic``: a kernel's generic code, measured / modelled at the values where the build
      ran it (interpolated between them, held beyond): generic code far off its bucket runs
      at other speeds than scaled from there;
    - ``bucket``: a kernel's bucket kernels, measured / modelled at the values up to its
      largest bucket where the build ran one (interpolated, held beyond): a large bucket's
      kernel padded down to small values runs at another factor than at its own size (the
      MLP's at 0.03-0.04x their figure at b = 6-10 and 0.7-0.9x at 179-223 in one run; one
      median over such values put the large ones at a quarter of their time);
    - ``above``: the one kernel that serves every value above its largest bucket (a range
      kernel padded far past its bucket, or a static one), measured / modelled at those
      values, interpolated (on the transformer block 1.3-4.5x its figure);
    - ``static``: the kernels without the variable, likewise;
    - ``rest_sec``: what the call spends outside the model's kernels (the VM's allocations,
      shape checks and branches, the pads and crops, the kernels' slowdown on the model's
      caches), added at each value (interpolated).

    The factors are the kernels', not the values': a plan that moves a value from generic code
    to a new bucket's kernel takes that kernel's factor there."""

    values: tuple[int, ...]
    measured_sec: tuple[float, ...]
    modelled_sec: tuple[float, ...]  # the model's kernel time for the same build
    rest_sec: tuple[float, ...]
    generic: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    bucket: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    above: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    static: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.values)
        sizes = {len(self.measured_sec), len(self.modelled_sec), len(self.rest_sec)}
        if not n or sizes != {n}:
            raise ValueError("calibration: one measured, modelled and rest time per value")
        if list(self.values) != sorted(set(self.values)):
            raise ValueError("calibration: values must be distinct and increasing")
        if min(self.measured_sec) <= 0 or min(self.modelled_sec) <= 0:
            raise ValueError("calibration: measured and modelled times must be positive")
        if min(self.rest_sec) < 0 or any(f <= 0 for f in self.factors()):
            raise ValueError("calibration: rest times and factors must be positive")

    def factors(self) -> list[float]:
        """Every measured / modelled factor it holds."""
        points = (*self.generic.values(), *self.bucket.values(), *self.above.values())
        return [*(f for pts in points for _, f in pts), *self.static.values()]

    def overhead(self, v: int) -> float:
        """The call's time outside the model's kernels at ``v``."""
        return _interpolate(v, list(zip(self.values, self.rest_sec, strict=True)))

    def generic_factor(self, kernel: str, v: int) -> float:
        points = self.generic.get(kernel)
        return _interpolate(v, list(points)) if points else 1.0

    def bucket_factor(self, kernel: str, v: int, above: bool) -> float:
        """A bucket kernel's factor at ``v`` (``above``: above the kernel's largest bucket;
        where none was timed there, the factors up to it)."""
        points = (self.above.get(kernel) if above else None) or self.bucket.get(kernel)
        return _interpolate(v, list(points)) if points else 1.0


def _interpolate(v: int, points: list[tuple[int, float]]) -> float:
    """Linear between the points (increasing x), held beyond them."""
    if v <= points[0][0]:
        return points[0][1]
    for (v0, y0), (v1, y1) in itertools.pairwise(points):
        if v <= v1:
            return y0 + (y1 - y0) * (v - v0) / (v1 - v0)
    return points[-1][1]


class Planner:
    """The planner of one model, profile and database (see module docstring)."""

    def __init__(
        self,
        mod: tvm.IRModule,
        target: tvm.target.Target,
        db: TuneFarmDatabase,
        profile: ShapeProfile,
        shape_vars: dict[str, list[int]] | None = None,
    ) -> None:
        profile = profile.for_model(mod)  # unknown variables, values out of range
        names = symbolic_vars(mod)
        if len(names) != 1:
            raise TuneFarmError(
                f"plan: the model has {len(names)} symbolic variables "
                f"({', '.join(names) or 'none'}); the planner handles one (use --shape)"
            )
        profile.require(names)
        self.mod, self.target, self.db, self.var = mod, target, db, names[0]
        self.profile, self.shape_vars = profile, shape_vars or {}
        self.bound = upper_bounds(mod).get(self.var)
        self.values = [(s[self.var], w) for s, w in profile.representatives(MAX_VALUES)]
        self.curves = fit_curves(db, target)
        self.curve = self.curves.overall
        self.calibration: Calibration | None = None
        self.new_only = False
        self._analyse()

    # ------------------------------------------------------------------ setup
    def _analyse(self) -> None:
        from tuner.symbolic.rangekernel import kernel_class, pad_values, symbolic_var, work_degree

        prepared = prepare(self.mod, self.target)
        self.kernels: dict[str, KernelModel] = {}
        self.statics: dict[str, TaskModel] = {}
        self.family: dict[str, str] = {}
        self.funcs: dict[str, Any] = {}
        self.static_funcs: dict[str, Any] = {}
        self.classes: dict[str, str] = {}
        for task in extract_tasks(prepared, self.target):
            self.classes[task.name] = kernel_class(task.mod["main"])
            if not task.is_symbolic:
                self.statics[task.name] = self._task(task.name, None, task.weight, task)
                self.static_funcs[task.name] = task.mod["main"]
                continue
            func = task.mod["main"]
            km = KernelModel(task.name, task.weight)
            var = symbolic_var(func)
            if var is None:
                km.reason = "several symbolic variables"
            else:
                pads = pad_values(func, var.name)
                if pads is None:
                    km.reason = f"reduces over {var.name}: no pad value"
                else:
                    km.degree = work_degree(func, var.name)
                    km.buffers = pad_buffers(func, var.name)
            self.kernels[task.name] = km
            self.family[task.name] = shash_of(task.mod)
            self.funcs[task.name] = func
        known = {
            bucket[self.var]
            for func in self.funcs.values()
            for bucket, _, _ in bucket_workloads(self.db, func, self.var)
        }
        self.known = sorted(v for v in known if self.bound is None or v <= self.bound)
        self.candidates = self._candidates()
        self.default_buckets = tuple(choose_buckets(self.mod, {}, self.shape_vars)[self.var])
        analysed = {*self.candidates, *self.known, *self._pow2(), *self.default_buckets}
        for value in sorted(analysed):
            self._add_bucket(value)
        for km in self.kernels.values():
            self._estimate_defaults(km)

    def _task(self, name: str, value: int | None, calls: int, task: Any) -> TaskModel:
        tm = TaskModel(name, value, calls, task.mod, task.flops)
        tm.recorded = self.db.count_records(task.mod, self.target)
        if tm.recorded:
            found = self.db.best(task.mod, self.target)
            tm.best_sec = found.mean_sec if found else None
            tm.default_sec = self.db.default_schedule_sec(task.mod, self.target)
            if value is not None and found is not None and name in self.funcs:
                km = self.kernels[name]
                tiles = _tiles_of(
                    self.funcs[name], found, self.var, self.db, self.target, value, km.degree
                )
                tm.tile, tm.fine_tile, tm.range_ratio, tm.fine_ratio = tiles
                tm.default_won = tm.tile is None
        fam = self.family.get(name)
        tm.cls = self.classes.get(name, "contraction")
        tm.curve = self.curves.for_task(fam, tm.cls)
        if fam and value is not None:
            tm.generic_sec = self.db.generic_sec(fam, {self.var: value}, self.target)
        if tm.default_sec is not None:
            tm.default_est = tm.default_sec
        return tm

    def _add_bucket(self, value: int) -> None:
        for bt in bucket_tasks(self.mod, self.target, {self.var: [value]}, self.funcs):
            for name in bt.kernels:  # by structure: names differ at constant shapes
                km = self.kernels[name]
                km.at[value] = self._task(name, value, km.calls, bt.task)

    def _estimate_defaults(self, km: KernelModel) -> None:
        measured = {b: t for b, t in km.at.items() if t.default_sec is not None}
        for b, tm in km.at.items():
            if tm.default_sec is not None:
                continue
            if measured:
                near, ref, scale = _nearest(measured, b, tm, km.degree)
                tm.default_est = ref.default_est * scale
                tm.default_source = f"scaled from {self.var}={near}"
            else:
                tm.default_est = _prior_default(tm)
                tm.default_source = "prior"
        # the generic code measured at some bucket: at the others, scaled from the nearest
        # (its default schedule's time is a lower bound: generic code is slower)
        generic = {b: t for b, t in km.at.items() if t.generic_sec is not None}
        for b, tm in km.at.items():
            if tm.generic_sec is None and generic:
                _, ref, scale = _nearest(generic, b, tm, km.degree)
                tm.generic_guess = max(tm.default_est, ref.generic_sec * scale)
        for tm in self.statics.values():
            if tm.default_sec is None:
                tm.default_est = _prior_default(tm)
                tm.default_source = "prior"
        for tm in [
            *self.statics.values(),
            *(t for k in self.kernels.values() for t in k.at.values()),
        ]:
            if tm.curve.source.startswith("family"):
                continue
            # a contraction ends near its roofline (the class's fitted floor comes from
            # other kernels' defaults, far slower or faster than this one's); the others
            # at their class's floor, or the roofline where that is higher
            # (plus a launch: q @ k^T at s=24, 1.5 us of FLOPs at the prior rate, ended at
            # 8.6 us from its default's 8.6; the same at s=56, 8 us, at 19.2 from 33.9)
            roof = max((tm.flops or 0.0) / (PRIOR_TUNED_GFLOPS * 1e9), tm.floor_sec)
            roof += PRIOR_LAUNCH_SEC
            floor = min(1.0, max(0.005, roof / tm.default_est)) if tm.default_est else 1.0
            if tm.cls != "contraction":
                floor = max(floor, tm.curve.floor)
            if tm.cls == "contraction" and floor * JUMP_MIN <= 1.0:
                # far from its roofline: the jump (the second trial reaches most of the
                # gain in orders of magnitude, the rest comes as its search closes in)
                tm.curve = GainCurve(floor, PRIOR_TAU, f"jump, {tm.curve.source}", log=True)
                continue
            # a curve fitted to other kernels' histories is as steep as theirs (matmuls whose
            # defaults ran 100x off jump in two trials); one near its roofline is not
            tau = max(tm.curve.tau, PRIOR_TAU)
            tm.curve = GainCurve(floor, tau, f"roofline, {tm.curve.source}")

    def _nice(self, v: int) -> int:
        return tileable(v, self.bound)

    def _pow2(self) -> list[int]:
        return powers_of_two(self.profile.marginal(self.var), self.bound)

    def _candidates(self) -> list[int]:
        qs = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
        first = [self._nice(self.profile.quantile(self.var, q)) for q in qs]
        ordered = list(dict.fromkeys([*first, *self.known, *self._pow2()]))
        return sorted(ordered[:MAX_CANDIDATES])

    # ------------------------------------------------------------------ the model
    def latency(
        self, chosen: Chosen, static_trials: dict[str, int], at: list[int] | None = None
    ) -> list[float]:
        """Predicted latency (kernel time) at each profile value (``self.values``), or at
        each of ``at`` (the dispatch chosen for the profile's traffic all the same)."""
        out = [0.0] * (len(self.values) if at is None else len(at))
        for km in self.kernels.values():
            for i, c in enumerate(self._kernel_costs(km, chosen.get(km.name, {}), at=at)):
                out[i] += km.calls * c
        cal = self.calibration
        for name, tm in self.statics.items():
            const = tm.calls * tm.time(static_trials.get(name, 0))
            const *= cal.static.get(name, 1.0) if cal is not None else 1.0
            out = [x + const for x in out]
        if cal is not None:
            vs = [v for v, _ in self.values] if at is None else at
            out = [x + cal.overhead(v) for x, v in zip(out, vs, strict=True)]
        return out

    def _kernel_costs(
        self,
        km: KernelModel,
        trials: dict[int, int],
        served: dict[int, float] | None = None,
        at: list[int] | None = None,
    ) -> list[float]:
        """Time of ``km`` at each profile value (or each of ``at``) under the dispatch of
        ``trials``' buckets; with ``served``, adds per bucket the traffic x work scale its
        kernels serve."""
        out = []
        values = self.values if at is None else [(v, 0.0) for v in at]
        cal = self.calibration
        top = _top_bucket(trials)
        dispatched = km.dispatch(trials)  # once, for the rule's pick and the best of searches
        best_of = self._best_of(km, trials, [v for v, _ in values], dispatched[0])
        served_by = self._served_by(km, trials, at, dispatched)
        for (v, w), bk, least in zip(values, served_by, best_of, strict=True):
            if bk is None:
                factor = cal.generic_factor(km.name, v) if cal is not None else 1.0
                out.append(km.generic(v) * factor)
                continue
            factor = cal.bucket_factor(km.name, v, above=v > top) if cal is not None else 1.0
            cost = bk.cost(v, km.degree, km.buffers)
            out.append((cost if least is None else min(cost, least)) * factor)
            if served is not None:  # (a static instance is its origin bucket's schedule)
                bucket = bk.origin or bk.value
                scale = (bk.padded(v) / bucket) ** km.degree
                served[bucket] = served.get(bucket, 0.0) + w * scale
        return out

    def _best_of(
        self,
        km: KernelModel,
        trials: dict[int, int],
        values: list[int],
        kernels: list[BucketKernel],
    ) -> list[float | None]:
        """At each of ``values`` up to the top bucket, the expected time of the fastest of
        the kernels of the buckets that can serve it, where two or more can and a search
        still to run makes any of them uncertain (None elsewhere: the rule's one kernel).

        Each bucket's kernels share one outcome, a lognormal factor (sd of log ``sd``) of
        mean 1 (sd: :meth:`TaskModel.spread`), so one bucket alone is priced as before; the
        dispatch times the kernels it builds and runs the fastest. The draws are
        stratified, each bucket's in its own fixed order, so a set's price is the same
        every time it is asked. ``kernels``: ``km.dispatch(trials)``'s."""
        none: list[float | None] = [None] * len(values)
        if km.reason:
            return none
        spread = {b: km.at[b].spread(t) for b, t in trials.items() if t >= 1 and b in km.at}
        if len(spread) < 2 or not any(spread.values()):
            return none
        import numpy as np

        origins = sorted({k.origin or k.value for k in kernels})
        cost = np.full((len(values), len(origins)), np.inf)
        col = {b: i for i, b in enumerate(origins)}
        for i, v in enumerate(values):
            for k in kernels:  # none serves a value above the top bucket
                if v <= k.value:
                    j = col[k.origin or k.value]
                    cost[i, j] = min(cost[i, j], k.cost(v, km.degree, km.buffers))
        factors = np.stack([_outcomes(b, spread[b]) for b in origins])
        least = (cost[:, :, None] * factors[None, :, :]).min(axis=1).mean(axis=1)
        several = (np.isfinite(cost).sum(axis=1) >= 2) & np.isfinite(least)
        return [float(x) if ok else None for x, ok in zip(least, several, strict=True)]

    def expected(self, chosen: Chosen, static_trials: dict[str, int]) -> float:
        lat = self.latency(chosen, static_trials)
        return sum(x * w for x, (_, w) in zip(lat, self.values, strict=True))

    # ------------------------------------------------------------------ trials
    def _base(self, buckets: tuple[int, ...]) -> tuple[Chosen, dict[str, int], int]:
        # a kernel with no task at a bucket (its specialization there is structurally another
        # kernel's, named after that one) has no bucket kernel there: generic
        chosen = {
            km.name: {b: max(km.at[b].recorded, 1) for b in buckets if b in km.at}
            for km in self.kernels.values()
        }
        statics = {n: max(t.recorded, 1) for n, t in self.statics.items()}
        used = sum(sum(c.values()) for c in chosen.values()) + sum(statics.values())
        return chosen, statics, used

    def split(
        self, buckets: tuple[int, ...], budget: int
    ) -> tuple[Chosen, dict[str, int], float] | None:
        """The greedy trial split for ``buckets`` (None: the budget cannot even measure
        each task's default), and its expected latency. ``budget`` counts the chosen tasks'
        records after the job; with :attr:`new_only`, only the records the job adds."""
        chosen, statics, used = self._base(buckets)
        if self.new_only:  # the records the chosen tasks hold already are not spent
            held = sum(
                tm.recorded for k in self.kernels.values() for b, tm in k.at.items() if b in buckets
            ) + sum(t.recorded for t in self.statics.values())
            budget += held
        if used > budget:
            return None
        best: tuple[Chosen, dict[str, int], float] | None = None
        # the first split weighs tasks by the traffic they serve with the budget spread
        # evenly (at one trial each, the default, no bucket kernel beats the generic one)
        # (at least EVEN_FLOOR each: a set of many buckets spreads a budget to one or two
        # trials a task, where no bucket kernel beats the generic one and nothing would ever
        # get a trial, so sets of many buckets lost to one by construction)
        n = sum(len(c) for c in chosen.values()) + len(statics)
        even = max(EVEN_FLOOR, budget // max(n, 1))
        weights_from = {k: {b: max(t, even) for b, t in v.items()} for k, v in chosen.items()}
        for _ in range(2):
            c, s = self._allocate(chosen, statics, weights_from, budget - used)
            value = self.expected(c, s)
            if best is None or value < best[2]:
                best = (c, s, value)
            weights_from = c
        return best

    def _allocate(
        self, chosen: Chosen, statics: dict[str, int], weights_from: Chosen, left: int
    ) -> tuple[Chosen, dict[str, int]]:
        """``left`` more trials on top of ``chosen``/``statics``, one at a time to the task
        whose predicted time x served traffic drops most; what each task serves is taken
        from the dispatch of ``weights_from``."""
        c = {k: dict(v) for k, v in chosen.items()}
        s = dict(statics)
        weights: dict[tuple[str, int | None], tuple[float, TaskModel]] = {}
        for km in self.kernels.values():
            served: dict[int, float] = {}
            self._kernel_costs(km, weights_from[km.name], served)
            for b, share in served.items():
                weights[(km.name, b)] = (km.calls * share, km.at[b])
        for name, tm in self.statics.items():
            weights[(name, None)] = (float(tm.calls), tm)

        def count(key: tuple[str, int | None]) -> int:
            return s[key[0]] if key[1] is None else c[key[0]][key[1]]

        def gain(key: tuple[str, int | None]) -> float:
            w, tm = weights[key]
            t = count(key)
            return w * (tm.time(t) - tm.time(t + 1))

        def entry(key: tuple[str, int | None]) -> tuple[float, float, tuple[str, int | None]]:
            # by predicted gain; where the curves predict none left (every task at its
            # floor), by the traffic served per trial it has: the budget is spent whole, as
            # the user asked (one bucket at 256 for the MLP's bimodal traffic left 8 of 64
            # trials unspent, where the strategies it is compared with spend 64); ties by
            # key (task names are unique: a static's None never meets a bucket)
            return (-gain(key), -weights[key][0] / (count(key) + 1), key)

        heap = [entry(k) for k in weights if weights[k][0] > 0]
        heapq.heapify(heap)
        while left > 0 and heap:
            key = heapq.heappop(heap)[-1]
            if key[1] is None:
                s[key[0]] += 1
            else:
                c[key[0]][key[1]] += 1
            left -= 1
            heapq.heappush(heap, entry(key))
        return c, s

    # ------------------------------------------------------------------ buckets
    def search(self, budget: int) -> tuple[tuple[int, ...], Chosen, dict[str, int], float]:
        """Bucket set by greedy growth then single swaps (see module docstring)."""
        cache: dict[tuple[int, ...], Any] = {}

        def score(buckets: tuple[int, ...]) -> float:
            if buckets not in cache:
                cache[buckets] = self.split(buckets, budget)
            found = cache[buckets]
            return math.inf if found is None else found[2]

        # a bucket with records is in the build whatever this plan tunes (the build dispatches
        # over every bucket the database holds): every set keeps it (a re-plan that left
        # out the first stage's other bucket predicted a build without it, 1.29x too slow)
        fixed = tuple(b for b in self.known if self._recorded(b))
        current: tuple[int, ...] = fixed
        while len(current) < max(MAX_BUCKETS, len(fixed) + 1):
            options = [tuple(sorted({*current, c})) for c in self.candidates if c not in current]
            if not options:
                break
            nxt = min(options, key=score)
            if current and score(nxt) >= score(current):
                break
            if score(nxt) == math.inf:
                break
            current = nxt
        if fixed and score(fixed) == math.inf:
            held = ",".join(map(str, fixed))
            raise TuneFarmError(
                f"plan: --trials {budget} is fewer than the records the database holds at "
                f"{self.var}={held} ({self._base(fixed)[2]}); --trials counts the records "
                "after the job: pass more"
            )
        if not current or score(current) == math.inf:
            raise TuneFarmError(
                f"plan: --trials {budget} cannot measure even the default schedules of one "
                f"bucket's tasks ({self._base((self.candidates[0],))[2]} needed)"
            )
        improved = True
        while improved:
            improved = False
            for old in (b for b in current if b not in fixed):
                for new in self.candidates:
                    if new in current:
                        continue
                    trial = tuple(sorted({*current, new} - {old}))
                    if score(trial) < score(current) - 1e-15:
                        current, improved = trial, True
                        break
                if improved:
                    break
        chosen, statics, value = cache[current]
        return current, chosen, statics, value

    def _recorded(self, bucket: int) -> bool:
        """Whether any of the model's tasks at ``bucket`` has a record."""
        return any(bucket in k.at and k.at[bucket].recorded for k in self.kernels.values())

    # ------------------------------------------------------------------ the plan
    def before(self) -> tuple[Chosen, dict[str, int]]:
        """What the database has now: each kernel's recorded buckets at their records."""
        chosen = {
            km.name: {b: tm.recorded for b, tm in km.at.items() if tm.recorded}
            for km in self.kernels.values()
        }
        return chosen, {n: t.recorded for n, t in self.statics.items()}

    def calibrate(self, timed: dict[int, Any]) -> Calibration:
        """The calibration by the database's build timed at ``timed``'s values (value ->
        its :class:`~tuner.kernel_profile.KernelProfile`); the planner uses it from then on
        (:attr:`calibration`), in its search as in its figures."""
        self.calibration = None  # the factors are against the model alone
        values = sorted(timed)
        before_c, before_s = self.before()
        modelled = self.latency(before_c, before_s, at=values)
        generic: dict[str, list[tuple[int, float]]] = {}
        bucket: dict[str, list[tuple[int, float]]] = {}
        above: dict[str, list[tuple[int, float]]] = {}
        static: dict[str, list[float]] = {}
        rest = []
        for v in values:
            ran: dict[tuple[str, str], float] = {}
            for k in timed[v].kernels:
                who = self._attribute(k.name)
                if who is not None:
                    ran[who] = ran.get(who, 0.0) + k.sec
            rest.append(max(timed[v].model_sec - sum(ran.values()), 0.0))
            for (kind, name), sec in ran.items():
                if kind == "static":
                    tm = self.statics[name]
                    model = tm.calls * tm.time(before_s.get(name, 0))
                    if model > 0:
                        static.setdefault(name, []).append(sec / model)
                    continue
                km = self.kernels[name]
                if kind == "generic":
                    model = km.calls * km.generic(v)
                    if model > 0:
                        generic.setdefault(name, []).append((v, sec / model))
                    continue
                trials = before_c.get(name, {})
                bk = self._served_by(km, trials, [v])[0]
                if bk is not None:  # a bucket kernel where the model has one too
                    model = km.calls * bk.cost(v, km.degree, km.buffers)
                    if model > 0 and v > _top_bucket(trials):
                        above.setdefault(name, []).append((v, sec / model))
                    elif model > 0:
                        bucket.setdefault(name, []).append((v, sec / model))
        cal = Calibration(
            tuple(values),
            tuple(timed[v].model_sec for v in values),
            tuple(modelled),
            tuple(rest),
            generic={k: tuple(pts) for k, pts in generic.items()},
            bucket={k: tuple(pts) for k, pts in bucket.items()},
            above={k: tuple(pts) for k, pts in above.items()},
            static={k: statistics.median(fs) for k, fs in static.items()},
        )
        self.calibration = cal
        return cal

    def _attribute(self, function: str) -> tuple[str, str] | None:
        """Which of the model's kernels a built function is: ("generic", kernel) for its
        generic code, ("bucket", kernel) for one of its bucket kernels
        (``{kernel}_{var}{bucket}...``), ("static", kernel); None: not a kernel the model
        prices (pads, crops, shape functions)."""
        if function in self.kernels:
            return ("generic", function)
        if function in self.statics:
            return ("static", function)

        def bucket_of(name: str) -> bool:
            prefix = f"{name}_{self.var}"
            return function.startswith(prefix) and function[len(prefix) :][:1].isdigit()

        found = max((n for n in self.kernels if bucket_of(n)), key=len, default=None)
        return None if found is None else ("bucket", found)

    def plan(
        self,
        budget: int,
        *,
        new_only: bool = False,
        measured: dict[int, Any] | None = None,
    ) -> Plan:
        """The plan for ``budget`` trials: the records of the planned tasks after the job
        (those already stored count), or with ``new_only`` the records the job adds (a
        re-plan between the stages of one budget, :func:`stage_budgets`). With
        ``measured`` (the database's build timed at some values, :meth:`calibrate`), the
        model is calibrated by it (:class:`Calibration`, kept for later plans), in the choice
        of buckets and trials as in the figures (``kernel_after_sec``: the same plan,
        uncalibrated)."""
        self.new_only = new_only
        if measured:
            self.calibrate(measured)
        cal = self.calibration
        buckets, chosen, statics, after = self.search(budget)
        before_c, before_s = self.before()
        untuned_c: Chosen = {k: {} for k in self.kernels}
        lat_after = self.latency(chosen, statics)
        lat_before = self.latency(before_c, before_s)
        kernel_after = None
        self.calibration = None  # the untuned build is another module: not calibrated
        if cal is not None:
            kernel_after = self.expected(chosen, statics)
        lat_untuned = self.latency(untuned_c, {})
        self.calibration = cal
        rows = _rows(self.values, buckets, lat_untuned, lat_before, lat_after)
        tasks = self._tasks(buckets, chosen, statics)
        alternatives = []
        for label, alt in self._alternatives(buckets):
            found = self.split(alt, budget)
            alternatives.append((label, None if found is None else found[2]))
        notes = []
        if any(t.default_source == "prior" for k in self.kernels.values() for t in k.at.values()):
            notes.append(
                f"kernels never measured: their default time is a prior ({PRIOR_GFLOPS:g} "
                "GFLOPS); tune once and re-plan for measured figures"
            )
        return Plan(
            var=self.var,
            buckets=buckets,
            budget=budget,
            tasks=tasks,
            rows=rows,
            untuned_sec=_mean(lat_untuned, self.values),
            before_sec=_mean(lat_before, self.values),
            after_sec=after,
            curve=self.curve,
            alternatives=tuple(alternatives),
            notes=tuple(notes),
            calibration=cal,
            kernel_after_sec=kernel_after,
        )

    def _alternatives(self, chosen: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
        default = self.default_buckets
        pow2 = tuple(self._pow2())
        out = [(f"default buckets {self.var}={','.join(map(str, default))}", default)]
        if pow2 != default:
            out.append((f"powers of two {self.var}={','.join(map(str, pow2))}", pow2))
        return [(label, b) for label, b in out if b != chosen]

    def _tasks(
        self, buckets: tuple[int, ...], chosen: Chosen, statics: dict[str, int]
    ) -> tuple[PlannedTask, ...]:
        out = []
        kernels = {**self.funcs, **self.static_funcs}
        for bt in bucket_tasks(self.mod, self.target, {self.var: list(buckets)}, kernels):
            # the symbolic module's kernel this task is (by structure), else its own name
            base = bt.kernels[0] if bt.kernels else bt.task.name.split("[", 1)[0]
            value = bt.bucket.get(self.var)
            km = self.kernels.get(base)
            if km is not None and value in km.at:
                tm, trials = km.at[value], chosen[base][value]
                share = self._share(km, chosen[base], value)
                why = self._why(km, tm, trials, share)
            elif base in self.statics:
                tm, trials, share = self.statics[base], statics[base], 1.0
                why = f"runs at every value ({tm.calls} call(s))"
            else:  # a kernel of the bucket the symbolic module does not name: default only
                tm = TaskModel(base, value, bt.task.weight, bt.task.mod, bt.task.flops)
                tm.recorded = self.db.count_records(bt.task.mod, self.target)
                trials, share, why = max(tm.recorded, 1), 0.0, "not a kernel of the model"
            out.append(
                PlannedTask(
                    name=bt.task.name,
                    kernel=base,
                    bucket=value,
                    calls=bt.task.weight,
                    recorded=tm.recorded,
                    trials=trials,
                    before_sec=tm.best_sec,
                    after_sec=tm.time(trials),
                    serves=share,
                    why=why,
                )
            )
        return tuple(out)

    def _share(self, km: KernelModel, trials: dict[int, int], value: int) -> float:
        """The traffic share the bucket ``value``'s kernels serve."""
        served = self._served_by(km, trials)
        return sum(
            w
            for (_, w), bk in zip(self.values, served, strict=True)
            if bk is not None and (bk.origin or bk.value) == value
        )

    def _served_by(
        self,
        km: KernelModel,
        trials: dict[int, int],
        at: list[int] | None = None,
        dispatched: tuple[list[BucketKernel], list[tuple[int, float]]] | None = None,
    ) -> list[BucketKernel | None]:
        """The bucket kernel the dispatch of ``trials``' buckets calls at each profile value
        (or each of ``at``; None: the generic kernel); ``dispatched``: ``km.dispatch(trials)``
        where the caller has it."""
        at = [v for v, _ in self.values] if at is None else at
        kernels, generic = km.dispatch(trials) if dispatched is None else dispatched
        if not kernels:
            return [None] * len(at)
        top = max(b.value for b in kernels)
        above = KernelDispatch(
            km.name,
            self.var,
            tuple(kernels),
            generic=tuple(generic),
            degree=km.degree,
            buffers=km.buffers,
            traffic=tuple(self.values),  # as `build --shape-profile` chooses above the top
        ).above
        intervals = choose_intervals(tuple(kernels), tuple(generic), km.degree, km.buffers)
        return [
            next(bk for upper, bk in intervals if v <= upper) if v <= top else above for v in at
        ]

    def _why(self, km: KernelModel, tm: TaskModel, trials: int, share: float) -> str:
        if km.reason:
            return f"generic at every value ({km.reason}): its default only"
        if share == 0:
            return "serves no traffic (the generic kernel is estimated faster): default only"
        src = "measured" if tm.best_sec is not None else f"default {tm.default_source}"
        gain = tm.default_est / tm.time(trials) if tm.time(trials) else 1.0
        return f"serves {share:.0%} of traffic; {src}; {gain:.1f}x the default predicted"


@functools.lru_cache(maxsize=256)
def _outcomes(bucket: int, sd: float) -> Any:
    """:data:`SPREAD_SAMPLES` stratified draws of one search's outcome factor (mean 1, sd
    of log ``sd``), in an order fixed by ``bucket``."""
    import numpy as np

    n = SPREAD_SAMPLES
    u = (np.random.default_rng(bucket).permutation(n) + 0.5) / n
    z = np.array([statistics.NormalDist().inv_cdf(float(x)) for x in u])
    draws = np.exp(sd * z)
    return draws / draws.mean()


def _mean(lat: list[float], values: list[tuple[int, float]]) -> float:
    return sum(x * w for x, (_, w) in zip(lat, values, strict=True))


def _rows(
    values: list[tuple[int, float]],
    buckets: tuple[int, ...],
    untuned: list[float],
    before: list[float],
    after: list[float],
) -> tuple[BucketRow, ...]:
    """Per bucket, the traffic of the values up to it (above the previous bucket) and the
    mean latency there: untuned, now and planned; then the values above every bucket."""
    edges: list[int | None] = [*buckets, None]
    out = []
    lo = 0
    for hi in edges:
        idx = [i for i, (v, _) in enumerate(values) if v > lo and (hi is None or v <= hi)]
        share = sum(values[i][1] for i in idx)
        if idx:

            def mean(lat: list[float], idx: list[int] = idx, share: float = share) -> float:
                return sum(lat[i] * values[i][1] for i in idx) / share

            out.append(BucketRow(hi, share, mean(untuned), mean(before), mean(after)))
        elif hi is not None:
            out.append(BucketRow(hi, 0.0, 0.0, 0.0, 0.0))
        lo = hi or 0
    return tuple(out)


Tiles = tuple[int | None, int | None, float | None, float | None]


def _tiles_of(
    func: Any, found: Any, var: str, db: TuneFarmDatabase, target: Any, value: int, degree: int
) -> Tiles:
    """The range kernel's tile of ``found``'s record (None: the default schedule won, the
    generic kernel serves; 0: it does not transplant) and its fine variant's (None: none),
    the variants the build makes (:func:`~tuner.symbolic.rangekernel.range_variants`), and
    each one's time at ``value`` over the record's as the build prices it
    (:func:`~tuner.symbolic.dispatch.timed_range_secs`; None: not timed)."""
    from tuner.symbolic.dispatch import timed_range_secs
    from tuner.symbolic.rangekernel import is_default, range_variants, rewrite_tiles

    record = found.record
    if is_default(record.trace):
        return None, None, None, None
    try:
        rewrite = rewrite_tiles(func, record.trace, var)
        variants = range_variants(func, record.trace, var, rewrite)
    except Exception:
        return 0, None, None, None
    if not variants:
        return 0, None, None, None
    secs = timed_range_secs(db, variants[:2], {var: value}, target, found.mean_sec, degree)
    ratios = [None if sec is None else sec / found.mean_sec for sec in secs] + [None]
    fine = variants[1].tile if len(variants) > 1 else None
    return variants[0].tile, fine, ratios[0], ratios[1]


def _prior_default(tm: TaskModel) -> float:
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
