"""The gain curve: how a task's time falls with its trials, fitted to the database's
tuning histories, with the priors used where there are none."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import tvm

from database import TuneFarmDatabase

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
