"""The planner's latency model: a bucket set and trial split's predicted time at each of
the profile's values, as the build's dispatch rule would serve it."""

from __future__ import annotations

import functools
import statistics
from typing import Any

from tuner.planner.analysis import ModelAnalysis
from tuner.planner.curves import (
    SPREAD_SAMPLES,
)
from tuner.planner.kernels import KernelModel, top_bucket
from tuner.planner.plan import Chosen
from tuner.symbolic.dispatch.rule import BucketKernel, KernelDispatch, choose_intervals


class LatencyModel(ModelAnalysis):
    """The expected latency of a bucket set and trial split (see :mod:`tuner.planner`)."""

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
        top = top_bucket(trials)
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
