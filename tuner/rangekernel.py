"""Range kernels: a schedule tuned at one static size, made valid for every size.

A trace tuned on the bucket-specialized kernel (static extent ``b``) cannot be replayed on the
symbolic kernel: ``SamplePerfectTile`` needs a static extent. We rewrite the trace: each tiling
of a loop over the symbolic variable ``n`` becomes a split with the outer factor left free
(``[None, f2, ..., fk]``), keeping the tuned inner factors. Replayed on the symbolic kernel
that would put a tail predicate in the innermost loops and block vectorization (measured ~25x
slower), so the trace is replayed on a *padded* kernel whose extent is ``m * T`` (``m`` a new
scalar parameter, ``T`` the least common multiple of the tuned inner tiles): every split then
divides exactly and the inner loops are predicate-free. Callers pad ``n`` up to a multiple of
``T`` with zeros and slice the result. That is correct when ``n`` is a data-parallel axis of
every block, or when a block reducing over ``n`` is a sum of products of zero-padded inputs
(``probs @ V`` in attention: the padded terms are exactly 0). :func:`pads_safely` checks it;
softmax over ``n`` (max, sum of exp) does not pass and keeps the generic kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx


class _SymbolicTile(Exception):
    """Raised by the decision provider at the first tiling of a symbolic loop."""

    def __init__(self, inst: Any) -> None:
        super().__init__("symbolic tile")
        self.inst = inst


def _uses(expr: Any, var_name: str) -> bool:
    if isinstance(expr, tirx.IntImm):
        return False
    return any(v.name == var_name for v in tirx.analysis.undefined_vars(expr))


def symbolic_var(func: tirx.PrimFunc) -> tirx.Var | None:
    """The single symbolic variable of a kernel's buffer shapes (None if 0 or several)."""
    found: dict[str, Any] = {}
    for param in func.params:
        for dim in getattr(param, "shape", None) or ():
            if not isinstance(dim, tirx.IntImm):
                for var in tirx.analysis.undefined_vars(dim):
                    found[var.name] = var
    return next(iter(found.values())) if len(found) == 1 else None


def pads_safely(func: tirx.PrimFunc, var_name: str) -> bool:
    """True when zero-padding ``var_name``-sized dims cannot change the rows below ``n``.

    Every buffer shape must use the variable as a whole dimension, and every block must
    iterate ``var_name``-sized axes only as data-parallel axes, or reduce over them as a
    zero-preserving sum (see :func:`_zero_preserving_sum`)."""
    for param in func.params:
        for dim in getattr(param, "shape", None) or ():
            if _uses(dim, var_name) and not isinstance(dim, tirx.Var):
                return False
    inputs = {p.name for p in func.params[:-1] if getattr(p, "shape", None) is not None}
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block_rv = stack.pop()
        block = sch.get(block_rv)
        reduce_vars = []
        for iv in block.iter_vars:
            if _uses(iv.dom.extent, var_name) and int(iv.iter_type) != 0:  # 0: data parallel
                if int(iv.iter_type) != 2:  # 2: commutative reduction
                    return False
                reduce_vars.append(iv.var)
        if reduce_vars and not _zero_preserving_sum(block, reduce_vars, inputs):
            return False
        stack.extend(sch.get_child_blocks(block_rv))
    return True


def _is_load(expr: Any) -> bool:
    # TVM 0.27 reads buffers with TensorLoad (``.source``); older TIR with BufferLoad (``.buffer``)
    return type(expr).__name__ in ("TensorLoad", "BufferLoad")


def _loaded(expr: Any) -> Any:
    return expr.source if hasattr(expr, "source") else expr.buffer


def _zero_preserving_sum(block: Any, reduce_vars: list[Any], inputs: set[str]) -> bool:
    """``C = C + a * b * ...`` from init 0, where every factor is a load of a kernel input
    (which the dispatch zero-pads) and some factor is indexed by the padded reduction axis:
    every term past ``n`` is then exactly 0 and the sum is unchanged."""
    init, body = block.init, block.body
    if type(init).__name__ != "BufferStore" or type(body).__name__ != "BufferStore":
        return False
    zero = init.value.value if isinstance(init.value, tirx.Cast) else init.value
    if not isinstance(zero, (tirx.FloatImm, tirx.IntImm)) or float(zero.value) != 0.0:
        return False
    value = body.value
    if not isinstance(value, tirx.Add):
        return False
    acc, term = value.a, value.b
    if not (_is_load(acc) and _loaded(acc).same_as(body.buffer)):
        acc, term = value.b, value.a
        if not (_is_load(acc) and _loaded(acc).same_as(body.buffer)):
            return False
    factors: list[Any] = []

    def collect(expr: Any) -> bool:
        if isinstance(expr, tirx.Mul):
            return collect(expr.a) and collect(expr.b)
        if isinstance(expr, tirx.Cast):
            return collect(expr.value)
        if _is_load(expr):
            factors.append(expr)
            return True
        return False

    if not collect(term) or any(_loaded(f).name not in inputs for f in factors):
        return False
    names = {v.name for v in reduce_vars}
    return any(
        any(v.name in names for idx in f.indices for v in tirx.analysis.undefined_vars(idx))
        for f in factors
    )


def pad_kernel(func: tirx.PrimFunc, var_name: str, tile: int) -> tirx.PrimFunc:
    """``func`` with the symbolic dim ``var_name`` replaced by ``m * tile``; ``m`` becomes a
    scalar int64 parameter placed before the (single, last) output buffer, where Relax's
    ``call_tir`` passes primitive arguments."""
    m = tirx.Var("m", "int64")
    remap = {}
    for param in func.params:
        shape = list(getattr(param, "shape", None) or ())
        if any(_uses(d, var_name) for d in shape):
            new_shape = [m * tile if _uses(d, var_name) else d for d in shape]
            remap[param] = tirx.decl_buffer(new_shape, param.dtype, name=param.name)
    padded = func.specialize(remap)
    params = list(padded.params)
    return tirx.PrimFunc([*params[:-1], m, params[-1]], padded.body, attrs=padded.attrs)


def _rewrite(trace: tvm.s_tir.Trace, target: Any) -> tuple[tvm.s_tir.Trace, int]:
    """Drop the SamplePerfectTile ``target`` and split its loop as ``[None, *inner factors]``.

    Returns the new trace and the product of the inner factors (the tile)."""
    from tvm.s_tir.schedule import Instruction

    decision = [int(d) for d in trace.decisions[target]]
    consts: dict[Any, Any] = {target.outputs[0]: None}
    for rv, factor in zip(target.outputs[1:], decision[1:], strict=True):
        consts[rv] = tvm.tirx.IntImm("int32", factor)
    insts, decisions = [], {}
    for inst in trace.insts:
        if inst.same_as(target):
            continue
        inputs = [_lookup(consts, x) for x in inst.inputs]
        new = Instruction(inst.kind, inputs, list(inst.attrs), list(inst.outputs))
        insts.append(new)
        if inst in trace.decisions:
            decisions[new] = trace.decisions[inst]
    return tvm.s_tir.Trace(insts, decisions), math.prod(decision[1:])


def _lookup(consts: dict[Any, Any], rv: Any) -> Any:
    for key, value in consts.items():
        if rv is not None and not isinstance(rv, (int, float, str)) and rv.same_as(key):
            return value
    return rv


@dataclass(frozen=True)
class RangeKernel:
    """A padded kernel with a transplanted schedule, valid for every ``n`` padded to ``tile``."""

    func: tirx.PrimFunc
    tile: int
    var_name: str


def _has_symbolic_vector_loop(sch: tvm.s_tir.Schedule) -> bool:
    """A vectorized or unrolled loop whose extent is not a constant (LLVM cannot build it)."""
    fixed_kinds = (int(tirx.ForKind.VECTORIZED.value), int(tirx.ForKind.UNROLLED.value))
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block = stack.pop()
        for loop_rv in sch.get_loops(block):
            loop = sch.get(loop_rv)
            if int(loop.kind) in fixed_kinds and not isinstance(loop.extent, tirx.IntImm):
                return True
        stack.extend(sch.get_child_blocks(block))
    return False


def _first_symbolic_tile(trace: tvm.s_tir.Trace, base: tvm.IRModule) -> tuple[bool, Any]:
    """Replay ``trace`` on ``base``: (whether it replays fully, the first SamplePerfectTile of a
    symbolic loop or None)."""
    sch = tvm.s_tir.Schedule(base)
    hit: list[Any] = []

    def provider(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        symbolic = inst.kind.name == "SamplePerfectTile" and not hit
        if symbolic and not isinstance(sch.get(inputs[0]).extent, tirx.IntImm):
            hit.append(inst)
            raise _SymbolicTile(inst)  # stops the replay (crosses the FFI as an error)
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=provider)
    except Exception:  # _SymbolicTile arrives re-wrapped by the FFI
        return False, hit[0] if hit else None
    return True, None


def transplant(func: tirx.PrimFunc, trace: tvm.s_tir.Trace, var_name: str) -> RangeKernel | None:
    """Make a range kernel of symbolic ``func`` from a trace tuned at a static size.

    Returns None when the trace cannot be transplanted onto the kernel.
    """
    tiles: list[int] = []
    base = tvm.IRModule({"main": func})
    # Find the SamplePerfectTile instructions on symbolic loops one at a time: replay the trace
    # on the symbolic kernel up to the first such tiling, rewrite it, start over.
    for _ in range(64):
        replays, hit = _first_symbolic_tile(trace, base)
        if hit is None:
            if not replays:
                return None  # the trace fails on this kernel for another reason
            break
        trace, tile = _rewrite(trace, hit)
        tiles.append(tile)
    else:
        return None
    base_tile = math.lcm(*tiles) if tiles else 1
    first: RangeKernel | None = None
    # Constant splits of loops fused across the symbolic axis (the postprocessors' parallel
    # and vectorize splits) divide m * tile only when the tile is a multiple of their factor:
    # the least multiple of the sampled tiles whose kernel has no predicate is taken.
    for tile in (base_tile << k for k in range(7)):
        padded = pad_kernel(func, var_name, tile)
        sch = tvm.s_tir.Schedule(tvm.IRModule({"main": padded}))
        try:
            trace.apply_to_schedule(sch, remove_postproc=False)
        except Exception:  # a trace that does not fit the padded kernel
            return None
        if _has_symbolic_vector_loop(sch):
            return None  # the tuned schedule vectorized or unrolled across the symbolic axis
        kernel = RangeKernel(func=sch.mod["main"], tile=tile, var_name=var_name)
        if "T.where(" not in kernel.func.script():
            return kernel
        first = first or kernel
    return first  # predicated whatever the tile (as the static kernel itself may be)
