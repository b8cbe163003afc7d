"""The dispatch in Relax: ``main`` cut into regions of the variables' values, each calling
its picks (a bucket branch pads, calls the padded kernel and crops), or a dispatch function
per call site where that cannot be done."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax, tirx
from tvm.s_tir.schedule import ScheduleError

from database import TuneFarmDatabase
from tuner.pipeline import normalize
from tuner.symbolic.dispatch.plan import KernelPlan, plan_kernel
from tuner.symbolic.dispatch.rule import BucketKernel, KernelDispatch
from tuner.symbolic.fixed import fixed_schedule
from tuner.symbolic.padding import CopyKernels, padded_to
from tuner.symbolic.rangekernel import (
    coefficient,
    free_inputs,
    pad_values,
    symbolic_var,
    uses_var,
)
from tuner.symbolic.walk import dim_vars, param_dims


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

    plan: KernelPlan
    model_var: tirx.Var
    pad_axes: list[list[tuple[int, int]]]  # per input: (axis, c) of each dim c * variable
    out_axes: list[tuple[int, int]]


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _site(call: relax.Call, prepared: tvm.IRModule, active: dict[str, KernelPlan]) -> _Site | None:
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
    func: relax.Function, prepared: tvm.IRModule, active: dict[str, KernelPlan]
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
    active: dict[str, KernelPlan],
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
    plans: dict[str, KernelPlan] = {}
    fixed: dict[relax.GlobalVar, tirx.PrimFunc] = {}
    for gv, func in prepared.functions.items():
        if isinstance(func, tirx.PrimFunc) and symbolic_var(func) is not None:
            plans[gv.name_hint] = plan_kernel(gv.name_hint, func, target, db, traffic or {})
        elif isinstance(func, tirx.PrimFunc):
            norm = normalize(func)
            if any(
                not isinstance(d, tirx.IntImm)
                for p in norm["main"].params
                for d in (getattr(p, "shape", None) or ())
            ):
                reason = "several symbolic variables"
                if target.kind.name == "llvm" and (sched := fixed_schedule(func)) is not None:
                    fixed[gv] = sched.func
                    reason += f"; {sched.label}"
                plans[gv.name_hint] = KernelPlan(KernelDispatch(gv.name_hint, None, reason=reason))
    if fixed:  # the fixed CPU schedule (tuner.symbolic.fixed) of kernels no bucket tunes
        prepared = prepared.clone()
        for gv, sched in fixed.items():
            prepared[gv] = sched
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
