"""What the planner knows of a model: its kernels and their tasks at each bucket, each
task's measured or estimated default and the curve it follows, the candidate buckets."""

from __future__ import annotations

from typing import Any

import tvm

from database import TuneFarmDatabase, shash_of
from tuner.errors import TuneFarmError
from tuner.pipeline import extract_tasks, prepare
from tuner.planner.curves import (
    JUMP_MIN,
    MAX_CANDIDATES,
    MAX_VALUES,
    PRIOR_LAUNCH_SEC,
    PRIOR_TAU,
    PRIOR_TUNED_GFLOPS,
    GainCurve,
    fit_curves,
)
from tuner.planner.kernels import KernelModel, TaskModel, nearest, prior_default
from tuner.planner.plan import Calibration
from tuner.planner.values import powers_of_two, tileable
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, symbolic_vars, upper_bounds
from tuner.symbolic.dispatch.plan import bucket_workloads, pad_buffers
from tuner.symbolic.profile import ShapeProfile


class ModelAnalysis:
    """A model's kernels for one profile and database, analysed (the planner's base: see
    :mod:`tuner.planner`)."""

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
                near, ref, scale = nearest(measured, b, tm, km.degree)
                tm.default_est = ref.default_est * scale
                tm.default_source = f"scaled from {self.var}={near}"
            else:
                tm.default_est = prior_default(tm)
                tm.default_source = "prior"
        # the generic code measured at some bucket: at the others, scaled from the nearest
        # (its default schedule's time is a lower bound: generic code is slower)
        generic = {b: t for b, t in km.at.items() if t.generic_sec is not None}
        for b, tm in km.at.items():
            if tm.generic_sec is None and generic:
                _, ref, scale = nearest(generic, b, tm, km.degree)
                tm.generic_guess = max(tm.default_est, ref.generic_sec * scale)
        for tm in self.statics.values():
            if tm.default_sec is None:
                tm.default_est = prior_default(tm)
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


# a record's range kernel tile, its fine variant's, and their times over the static kernel's
Tiles = tuple[int | None, int | None, float | None, float | None]


def _tiles_of(
    func: Any, found: Any, var: str, db: TuneFarmDatabase, target: Any, value: int, degree: int
) -> Tiles:
    """The range kernel's tile of ``found``'s record (None: the default schedule won, the
    generic kernel serves; 0: it does not transplant) and its fine variant's (None: none),
    the variants the build makes (:func:`~tuner.symbolic.rangekernel.range_variants`), and
    each one's time at ``value`` over the record's as the build prices it
    (:func:`~tuner.symbolic.dispatch.plan.timed_range_secs`; None: not timed)."""
    from tuner.symbolic.dispatch.plan import timed_range_secs
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
