"""The planner of one model, profile and database: the trial split and the bucket set
that minimise the expected latency, the calibration between stages, and the plan."""

from __future__ import annotations

import heapq
import math
import statistics
from dataclasses import replace
from typing import Any

from database.jobs import latest_convergence
from tuner.errors import TuneFarmError
from tuner.planner.curves import (
    EVEN_FLOOR,
    MAX_BUCKETS,
    PRIOR_GFLOPS,
)
from tuner.planner.kernels import KernelModel, TaskModel, top_bucket
from tuner.planner.latency import LatencyModel
from tuner.planner.plan import BucketRow, Calibration, Chosen, Plan, PlannedTask
from tuner.symbolic.buckets import bucket_tasks


class Planner(LatencyModel):
    """The planner of one model, profile and database (see :mod:`tuner.planner`)."""

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
                    if model > 0 and v > top_bucket(trials):
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
        wids: list[int | None] = []
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
            wids.append(self.db.workload_id(bt.task.mod))
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
        known = [w for w in wids if w is not None]
        conv = self.db.storage.run(lambda s: latest_convergence(s, known), write=False)
        return tuple(
            replace(t, converged=conv[w][0], expected_gain=conv[w][1]) if w in conv else t
            for t, w in zip(out, wids, strict=True)
        )

    def _why(self, km: KernelModel, tm: TaskModel, trials: int, share: float) -> str:
        if km.reason:
            return f"generic at every value ({km.reason}): its default only"
        if share == 0:
            return "serves no traffic (the generic kernel is estimated faster): default only"
        src = "measured" if tm.best_sec is not None else f"default {tm.default_source}"
        gain = tm.default_est / tm.time(trials) if tm.time(trials) else 1.0
        return f"serves {share:.0%} of traffic; {src}; {gain:.1f}x the default predicted"


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
