"""Build a Relax module with the schedule database applied at build time.

``compile(mod, target, db=...)`` is the Python API a team can call inside its own pipeline;
``tunefarm build`` is a thin wrapper around it. The database pass wraps MetaSchedule's
``MetaScheduleApplyDatabase`` and reports, per kernel, whether a tuned record was used and at
which lookup level (same device, same target, same architecture, same target kind).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import tvm
from tvm import relax

from database import Storage, TuneFarmDatabase
from database.evidence import Evidence, evidence_fields
from tuner.errors import TuneFarmError
from tuner.fastimport import preload_tensor_intrin
from tuner.pipeline import backend_passes, legalize, normalize, prepare, symbolic_vars_of
from tuner.symbolic.dispatch.emit import add_dispatch
from tuner.symbolic.dispatch.rule import KernelDispatch
from workers import fast_math
from workers.fingerprint import local_device_for

fast_math.install()  # the same erf lowering as the builders that measured the records


@dataclass(frozen=True)
class KernelReport:
    """Where one kernel's schedule came from."""

    name: str
    calls: int
    # "tuned"; "buckets" (symbolic, dispatched to bucket kernels); "default" (symbolic, tuned at
    # every bucket, where the default schedule measured fastest: the generic kernel is that
    # schedule); "untuned"
    source: str
    level: str | None  # lookup level of the tuned record
    mean_sec: float | None  # the record's measured latency
    symbolic: bool = False
    dispatch: str | None = None  # for symbolic kernels: the dispatch rule in force
    # how sure the tuned record is (database.evidence): the pooled runs of its schedule; a
    # symbolic kernel's per bucket its dispatch uses, as (bucket value, evidence)
    evidence: Evidence | None = field(default=None, compare=False)
    buckets: tuple[tuple[int, Evidence], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        """``build --json``'s kernel: where its schedule came from and its evidence
        (``runs``, ``median``, ``spread``, ``confirmed``, as ``db best --json``)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("evidence", "buckets")}
        out |= evidence_fields(self.evidence)
        if self.symbolic:
            out["buckets"] = [{"bucket": v, **evidence_fields(ev)} for v, ev in self.buckets]
        return out


@dataclass(frozen=True)
class BuildReport:
    """Which kernels (weighted by call count) came from tuned records."""

    kernels: tuple[KernelReport, ...]
    # (bucket kernel name, evidence) of the symbolic kernels' dispatches
    bucket_kernels: tuple[tuple[str, Evidence], ...] = field(default=(), compare=False)

    @property
    def tuned_calls(self) -> int:
        return sum(k.calls for k in self.kernels if k.source != "untuned")

    @property
    def total_calls(self) -> int:
        return sum(k.calls for k in self.kernels)

    @property
    def tuned_share(self) -> float:
        return self.tuned_calls / self.total_calls if self.total_calls else 0.0

    @property
    def untuned(self) -> list[str]:
        return [k.name for k in self.kernels if k.source == "untuned"]

    def function_evidence(self) -> dict[str, Evidence]:
        """The evidence behind each function of the build by name: a tuned kernel's, and
        each bucket kernel's (the record of the bucket it was made from)."""
        out = {k.name: k.evidence for k in self.kernels if k.evidence is not None}
        for name, ev in self.bucket_kernels:
            out[name] = ev
        return out


def _call_counts(mod: tvm.IRModule) -> dict[str, int]:
    counts: dict[str, int] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            gv = expr.args[0]
            counts[gv.name_hint] = counts.get(gv.name_hint, 0) + 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return counts


def inspect_kernels(
    prepared: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase | None,
    dispatch: dict[str, KernelDispatch] | None = None,
) -> BuildReport:
    """Look every PrimFunc of a prepared module up in ``db`` the way the build will."""
    dispatch = dispatch or {}
    counts = _call_counts(prepared)
    kernels = []
    for gv, func in prepared.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        name = gv.name_hint
        symbolic = bool(symbolic_vars_of(func))
        found = db.best(normalize(func), target) if db is not None and not symbolic else None
        plan = dispatch.get(name)
        # "buckets": the dispatch runs a bucket kernel for some value (one whose rule runs the
        # generic kernel everywhere is the untuned build's kernel)
        source = (
            "tuned"
            if found
            else "buckets"
            if plan and plan.used
            else "default"
            if plan and plan.default_won
            else "untuned"
        )
        kernels.append(
            KernelReport(
                name=name,
                calls=counts.get(name, 1),
                source=source,
                level=found.level if found else None,
                mean_sec=found.mean_sec if found else None,
                symbolic=symbolic,
                dispatch=plan.describe() if plan else None,
                evidence=found.evidence if found else None,
                buckets=_bucket_evidence(plan) if plan else (),
            )
        )
    kernels.sort(key=lambda k: k.name)
    named = tuple(
        (b.name, b.evidence)
        for plan in dispatch.values()
        for b in plan.buckets
        if b.evidence is not None
    )
    return BuildReport(tuple(kernels), named)


def _bucket_evidence(plan: KernelDispatch) -> tuple[tuple[int, Evidence], ...]:
    """(bucket value, evidence) of each bucket whose record the dispatch's kernels use."""
    seen: dict[int, Evidence] = {}
    for b in plan.buckets:
        if b.evidence is not None:
            seen.setdefault(b.origin or b.value, b.evidence)
    return tuple(sorted(seen.items(), key=lambda kv: kv[0]))


def _with_database(
    prepared: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> tuple[tvm.IRModule, dict[str, KernelDispatch]]:
    """Bucket dispatch for symbolic kernels, then tuned schedules for static ones.

    Runs inside ``with target, db``."""
    mod, dispatch = add_dispatch(prepared, target, db, traffic)
    mod = legalize()(mod)  # the pads and slices the dispatch added
    mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
    return mod, dispatch


def apply_database(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> tvm.IRModule:
    """The prepared module with tuned schedules and bucket dispatch applied (before
    lowering), for inspection."""
    preload_tensor_intrin(target)
    prepared = prepare(mod, target)
    with target, db, tvm.transform.PassContext(opt_level=3):
        return _with_database(prepared, target, db, traffic)[0]


def compile(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    db: TuneFarmDatabase | Storage | str | None = None,
    *,
    strict: bool = False,
    traffic: Mapping[str, Mapping[int, float]] | None = None,
) -> tuple[relax.VMExecutable, BuildReport]:
    """Compile ``mod`` for ``target``, applying the best schedules from ``db``.

    ``db`` may be a database, a storage or a URL; ``None`` builds the untuned default.
    Symbolic kernels dispatch at run time to range kernels of their tuned buckets (see
    :mod:`tuner.symbolic.dispatch`); ``traffic`` (per variable, observed values and their
    counts: a shape profile's marginals) weighs the choice above the largest bucket. With
    ``strict``, a kernel without a tuned record is an error.
    """
    if isinstance(db, str):
        db = Storage(db, create=False)
    if isinstance(db, Storage):
        db = TuneFarmDatabase(db)
    if db is not None and db.device is None:
        db.device = local_device_for(target)  # enables the exact-device lookup level
    prepared = prepare(mod, target)
    applied, dispatch = prepared, {}
    if db is not None:
        preload_tensor_intrin(target)  # traces may use tensor intrinsics
        with target, db, tvm.transform.PassContext(opt_level=3):
            applied, dispatch = _with_database(prepared, target, db, traffic)
    report = inspect_kernels(prepared, target, db, dispatch)
    if strict and report.untuned:
        raise TuneFarmError(
            f"--strict: {len(report.untuned)} kernel(s) have no tuned record: "
            + ", ".join(report.untuned)
        )
    is_gpu = relax.pipeline.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def lower(m: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if is_gpu:
            m = default_gpu_schedule(m)
        passes = [
            *backend_passes(target, "dataflow_lower_passes"),
            *backend_passes(target, "finalize_passes"),
        ]
        return tvm.transform.Sequential(passes)(m)

    with target, tvm.transform.PassContext(opt_level=3):
        ex = relax.build(applied, target=target, relax_pipeline=lower)
    return ex, report


def _gpu_rules() -> list[Any]:
    from tvm.s_tir import dlight as dl

    return [
        dl.gpu.Matmul(),
        dl.gpu.GEMV(),
        dl.gpu.Reduction(),
        dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    ]


def default_gpu_schedule(mod: tvm.IRModule) -> tvm.IRModule:
    """dlight's default GPU schedules for every kernel without one (call inside a target
    scope): what an untuned kernel runs as on a GPU. An unscheduled kernel binds no threads,
    so it would run as host code on device memory. The dispatch's pad and crop copies
    (``tunefarm.copy``) are marked scheduled for the CPU, where they stay serial; on a GPU
    they get dlight's schedule too. ``mod`` itself is left as it is."""
    from tvm.s_tir import dlight as dl

    mod = mod.clone()  # dlight schedules the module it is given in place
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs and "tunefarm.copy" in func.attrs:
            mod[gv] = func.without_attr("tirx.is_scheduled")
    return dl.ApplyDefaultSchedule(*_gpu_rules())(mod)


def default_gpu_trace(task_mod: tvm.IRModule, target: tvm.target.Target) -> tvm.s_tir.Schedule:
    """dlight's default schedule of a one-kernel workload as a schedule whose trace replays on
    it, so the untuned GPU kernel can be recorded as a candidate like the CPU's empty trace."""
    from tvm.s_tir.dlight.base.transform import _apply_rules

    with target:
        found = _apply_rules(task_mod["main"], target, _gpu_rules(), tunable=False)
    if not found:  # Fallback takes any kernel; this is a kernel dlight cannot schedule
        raise TuneFarmError(f"no default GPU schedule for {task_mod['main'].attrs}")
    return found[0]
