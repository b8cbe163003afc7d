"""Range kernels: a schedule tuned at one static size, made valid for every size.

A trace tuned on the bucket-specialized kernel (static extent ``b``) cannot be replayed on the
symbolic kernel: ``SamplePerfectTile`` needs a static extent. We rewrite the trace: each tiling
of a loop over the symbolic variable ``n`` becomes a split with the outer factor left free
(``[None, f2, ..., fk]``), keeping the tuned inner factors. Replayed on the symbolic kernel
that would put a tail predicate in the innermost loops and block vectorization (measured ~25x
slower), so the trace is replayed on a *padded* kernel whose extent is ``m * T`` (``m`` a new
scalar parameter, ``T`` the least common multiple of the tuned inner tiles): every split then
divides exactly and the inner loops are predicate-free. Callers pad ``n`` up to a multiple of
``T`` and slice the result. The pad value of each input is chosen by :func:`pad_values` so that
no row below ``n`` changes: any value when ``n`` is a data-parallel axis of every block, 0 for a
sum over ``n`` of products of inputs (``probs @ V`` in attention), -inf for softmax over ``n``
(the max ignores it, ``exp(-inf - max) = 0`` leaves the sum unchanged).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from database.records import shash_of
from tuner.symbolic.walk import dim_vars, vars_of


class _SymbolicTile(Exception):
    """Raised by the decision provider at the first tiling of a symbolic loop."""

    def __init__(self, inst: Any) -> None:
        super().__init__("symbolic tile")
        self.inst = inst


def uses_var(expr: Any, var_name: str) -> bool:
    return any(v.name == var_name for v in dim_vars(expr))


def coefficient(dim: Any, var_name: str | None = None) -> int | None:
    """``c`` where ``dim`` is ``c * var`` (1: the variable itself; ``var_name`` None: any
    variable), as a flattened ``[b * 65, 128]`` of a ViT's tokens is; None for any other
    dim."""
    if isinstance(dim, tirx.Var):
        return 1 if var_name is None or dim.name == var_name else None
    if type(dim).__name__ == "Mul":
        a, b = (dim.b, dim.a) if isinstance(dim.b, tirx.IntImm) else (dim.a, dim.b)
        if isinstance(a, tirx.IntImm) and int(a.value) > 0 and coefficient(b, var_name) == 1:
            return int(a.value)
    return None


def symbolic_var(func: tirx.PrimFunc) -> tirx.Var | None:
    """The single symbolic variable of a kernel's buffer shapes (None if 0 or several)."""
    found = vars_of(func.params)
    return next(iter(found.values())) if len(found) == 1 else None


# What is known of a value at padded positions (the abstract domain of :func:`pad_values`).
ZERO, NEG_INF, POS_INF, REAL, ANY = "0", "-inf", "+inf", "real", "any"
_NEGATE = {ZERO: ZERO, REAL: REAL, NEG_INF: POS_INF, POS_INF: NEG_INF, ANY: ANY}
# The element a reduction's padded terms must be, to leave the result unchanged.
_IDENTITY = {"Add": ZERO, "Max": NEG_INF, "Min": POS_INF}
# Candidate pad values of an input, in order of preference.
_PADS = (0.0, float("-inf"), float("inf"))
_STATE_OF_PAD = {0.0: ZERO, float("-inf"): NEG_INF, float("inf"): POS_INF}


def pad_values(func: tirx.PrimFunc, var_name: str) -> dict[str, float] | None:
    """Per input buffer, the value to pad ``var_name``-sized dims with so that the rows below
    ``n`` are unchanged; None when no choice of 0, -inf or +inf does.

    Every buffer shape must use the variable as a whole dimension or a multiple of it
    (``c * n``: padded at its tail, as ``n`` is). Blocks are checked in
    program order by abstract interpretation: for each axis over ``n`` of each intermediate
    buffer we know what its elements are where that index is padded (exactly 0, -inf, +inf,
    some finite value, or anything). A block reducing over ``n`` must see, at padded
    reduction indices and real output indices, the identity of its combiner: 0 for a sum
    (``probs @ V`` with zero-padded inputs), -inf for a max; a sum of ``exp(x - max)`` over
    -inf-padded ``x`` (softmax) sees ``exp(-inf) = 0``. Data-parallel padded rows may hold
    anything: they are sliced off, unless a later reduction reads them. A block whose
    arithmetic uses ``n`` itself (a mean divides by it) cannot be padded."""
    for param in func.params:
        for dim in getattr(param, "shape", None) or ():
            if uses_var(dim, var_name) and coefficient(dim, var_name) is None:
                return None
    padded_inputs = [
        p.name
        for p in func.params[:-1]
        if any(uses_var(d, var_name) for d in getattr(p, "shape", None) or ())
    ]
    blocks = blocks_in_order(func)
    for choice in itertools.product(_PADS, repeat=len(padded_inputs)):
        pads = dict(zip(padded_inputs, choice, strict=True))
        if _neutral(blocks, var_name, {k: _STATE_OF_PAD[v] for k, v in pads.items()}):
            return pads
    return None


def free_inputs(func: tirx.PrimFunc, var_name: str, pads: dict[str, float]) -> frozenset[str]:
    """The padded inputs of ``func`` whose padding may hold anything, all at once, with the
    others padded as ``pads`` says: a data-parallel input (``x`` of ``x @ W``, either side of
    an add) whose padded rows reach only padded rows of the output. Such an input can be
    handed the previous kernel's padded output as it is, padding and all, instead of a crop
    and a new pad. Empty when no input is free or not all the free ones together."""
    blocks = blocks_in_order(func)
    base = {k: _STATE_OF_PAD[v] for k, v in pads.items()}
    free = [k for k in pads if _neutral(blocks, var_name, {**base, k: ANY})]
    if len(free) > 1 and not _neutral(blocks, var_name, {**base, **dict.fromkeys(free, ANY)}):
        return frozenset()
    return frozenset(free)


def work_degree(func: tirx.PrimFunc, var_name: str) -> int:
    """How many loop axes over ``var_name`` the busiest block has: the kernel's work grows
    as ``n ** degree`` (1 for ``x @ W``, 2 for ``q @ k^T`` over ``s x s``)."""
    return (
        max(
            (
                sum(uses_var(iv.dom.extent, var_name) for iv in b.iter_vars)
                for b in blocks_in_order(func)
            ),
            default=1,
        )
        or 1
    )


KERNEL_CLASSES = ("contraction", "reduction", "injective")


def kernel_class(func: tirx.PrimFunc) -> str:
    """How the kernel's work is shaped, for tuning-gain curves that differ by it:
    ``contraction`` (a reduction whose update multiplies two loaded buffers: a matmul, a
    convolution; tuning gains tiles, vectors and threads on reused data), ``reduction``
    (softmax, layer norm: reductions over one buffer) or ``injective`` (no reduction)."""
    found = "injective"
    for block in blocks_in_order(func):
        if not any(int(iv.iter_type) == 2 for iv in block.iter_vars):
            continue
        found = "reduction"
        value = getattr(block.body, "value", None)
        for term in (getattr(value, "a", None), getattr(value, "b", None)):
            if type(term).__name__ == "Mul" and all(_loads_buffer(x) for x in (term.a, term.b)):
                return "contraction"
    return found


def _loads_buffer(expr: Any) -> bool:
    """A buffer load, possibly under casts."""
    while type(expr).__name__ == "Cast":
        expr = expr.value
    return _is_load(expr)


def blocks_in_order(func: tirx.PrimFunc) -> list[Any]:
    """Every block of ``func``, parents before children, in program order."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    out: list[Any] = []

    def walk(parent: Any) -> None:
        for rv in sch.get_child_blocks(parent):
            out.append(sch.get(rv))
            walk(rv)

    walk(sch.get_sblock("root"))
    return out


def _neutral(blocks: list[Any], var_name: str, inputs: dict[str, str]) -> bool:
    """Whether, with the inputs padded as ``inputs`` says, every reduction over the padded
    axis sees only its combiner's identity there."""
    axis_state: dict[str, dict[int, str]] = {}  # intermediate -> axis -> state when padded
    for block in blocks:
        store = block.body
        if type(store).__name__ != "BufferStore":
            return False
        init = getattr(block.init, "value", None)
        if uses_var(store.value, var_name) or (init is not None and uses_var(init, var_name)):
            return False  # arithmetic on n itself (a mean divides by n): padding changes it
        v_iters = [iv for iv in block.iter_vars if uses_var(iv.dom.extent, var_name)]
        if not v_iters:
            continue
        reduce = [iv.var for iv in v_iters if int(iv.iter_type) != 0]
        if any(int(iv.iter_type) not in (0, 2) for iv in v_iters):
            return False  # 0: data parallel, 2: commutative reduction
        out = store.buffer.name
        if reduce:
            combiner = type(store.value).__name__
            if combiner not in _IDENTITY:
                return False
            acc, term = store.value.a, store.value.b
            if not (_is_load(acc) and _loaded(acc).name == out):
                acc, term = term, acc
                if not (_is_load(acc) and _loaded(acc).name == out):
                    return False
            for r in reduce:
                if _state(term, {r.name}, inputs, axis_state) != _IDENTITY[combiner]:
                    return False
            axis_state[out] = {}  # padded rows of a reduction: anything
            continue
        states: dict[int, str] = {}
        for axis, index in enumerate(store.indices):
            padded = {iv.var.name for iv in v_iters if uses_var(index, iv.var.name)}
            if padded:
                states[axis] = _state(store.value, padded, inputs, axis_state)
        axis_state[out] = states
    return True


def _state(expr: Any, padded: set[str], inputs: dict[str, str], axes: dict[str, Any]) -> str:
    """What ``expr`` is when the iteration variables in ``padded`` index padding."""

    def rec(e: Any) -> str:
        return _state(e, padded, inputs, axes)

    def hit(e: Any) -> bool:
        return any(v.name in padded for v in tirx.analysis.undefined_vars(e))

    if _is_load(expr):
        name = _loaded(expr).name
        where = [i for i, idx in enumerate(expr.indices) if hit(idx)]
        if not where:
            return REAL
        if name in inputs:
            return inputs[name]
        return axes.get(name, {}).get(where[0], ANY) if len(where) == 1 else ANY
    kind = type(expr).__name__
    if kind in ("FloatImm", "IntImm"):
        value = float(expr.value)
        return ZERO if value == 0 else {math.inf: POS_INF, -math.inf: NEG_INF}.get(value, REAL)
    if kind == "Cast":
        return rec(expr.value)
    if kind in ("Add", "Sub"):
        a, b = rec(expr.a), rec(expr.b)
        if kind == "Sub":
            b = _NEGATE[b]
        if b == ZERO:
            return a
        if a == ZERO:
            return b
        if ANY in (a, b):
            return ANY
        if a in (REAL, b):
            return b  # real + real, real + inf, inf + the same inf
        return a if b == REAL else ANY  # inf + real; -inf + inf is NaN
    if kind == "Mul":
        a, b = rec(expr.a), rec(expr.b)
        if ZERO in (a, b) and {a, b} <= {ZERO, REAL}:
            return ZERO
        return REAL if a == b == REAL else ANY
    if kind == "Div":
        a, divisor = rec(expr.a), expr.b
        if type(divisor).__name__ == "FloatImm" and float(divisor.value) != 0:
            return a if float(divisor.value) > 0 else _NEGATE[a]
        return REAL if a == rec(divisor) == REAL else ANY
    if kind in ("Max", "Min"):
        a, b = rec(expr.a), rec(expr.b)
        drop = NEG_INF if kind == "Max" else POS_INF
        if a == drop:
            return b
        if b == drop:
            return a
        return REAL if {a, b} <= {REAL, ZERO} else ANY
    if kind == "Call" and getattr(expr.op, "name", "") == "tirx.exp":
        return {NEG_INF: ZERO, ZERO: REAL, REAL: REAL}.get(rec(expr.args[0]), ANY)
    # anything else (other intrinsics, selects, index arithmetic): finite where its inputs
    # are, unknown where it reads padding
    return ANY if any(rec(c) not in (REAL, ZERO) for c in _operands(expr)) else REAL


def _operands(expr: Any) -> list[Any]:
    """The operand expressions of a TIR expression (its arguments, branches, sides)."""
    out: list[Any] = []
    for field in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, field, None)
        if isinstance(child, tvm.ir.expr.Expr):
            out.append(child)
    out.extend(a for a in getattr(expr, "args", None) or () if isinstance(a, tvm.ir.expr.Expr))
    return out


def _is_load(expr: Any) -> bool:
    # TVM 0.27 reads buffers with TensorLoad (``.source``); older TIR with BufferLoad (``.buffer``)
    return type(expr).__name__ in ("TensorLoad", "BufferLoad")


def _loaded(expr: Any) -> Any:
    return expr.source if hasattr(expr, "source") else expr.buffer


def pad_kernel(func: tirx.PrimFunc, var_name: str, tile: int) -> tirx.PrimFunc:
    """``func`` with the symbolic variable ``var_name`` replaced by ``m * tile`` (a dim
    ``c * var``, a ViT's flattened ``[b * 197, H]`` tokens, becomes ``c * m * tile``); ``m``
    becomes a scalar int64 parameter placed before the (single, last) output buffer, where
    Relax's ``call_tir`` passes primitive arguments."""
    var = vars_of(func.params)[var_name]
    m = tirx.Var("m", "int64")
    # the variable as a scalar parameter (where the kernel does not take it as one already),
    # bound to m * tile, then dropped (a dim ``c * var`` binds no variable when its buffer is
    # replaced, as a dim ``var`` does)
    taken = any(p.same_as(var) for p in func.params)
    wide = func if taken else tirx.PrimFunc([var, *func.params], func.body, attrs=func.attrs)
    padded = wide.specialize({var: m * tirx.IntImm(str(var.ty), tile)})
    params = list(padded.params)
    return tirx.PrimFunc([*params[:-1], m, params[-1]], padded.body, attrs=padded.attrs)


def _rewrite(
    trace: tvm.s_tir.Trace, target: Any, fine: bool = False
) -> tuple[tvm.s_tir.Trace, int]:
    """Drop the SamplePerfectTile ``target`` and split its loop as ``[None, *inner factors]``
    (``fine``: ``[None, 1, ..., 1, innermost factor]``, the register tile kept and the cache
    tiles between it and the outer loop dropped, so that the kernel pads to a smaller tile).

    Returns the new trace and the product of the inner factors (the tile)."""
    from tvm.s_tir.schedule import Instruction

    decision = [int(d) for d in trace.decisions[target]]
    if fine and len(decision) > 2:
        decision = [decision[0], *[1] * (len(decision) - 2), decision[-1]]
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

    @property
    def key(self) -> str:
        """The kernel's structural hash: the tune stores its measured time under it
        (:mod:`tuner.job.probes`), the build looks it up by it."""
        return shash_of(self.func)

    def args_at(self, value: int) -> list[list[Any]]:
        """Its arguments at ``value`` (padded to the tile) as a record stores them: each
        buffer ``["TENSOR", dtype, shape]``, the tile count ``m`` ``["SCALAR", "int64", m]``."""
        m = next(p for p in self.func.params if not isinstance(p.ty, tirx.buffer.BufferType))
        return args_at(self.func, m, self.padded(value) // self.tile)

    def padded(self, value: int) -> int:
        """``value`` rounded up to the tile: the extent the kernel computes there."""
        return -(-value // self.tile) * self.tile


def args_at(func: tirx.PrimFunc, var: tirx.Var, value: int) -> list[list[Any]]:
    """``func``'s arguments with ``var`` (a range kernel's ``m``, a kernel's symbolic
    variable) at ``value``, as a record stores them: each buffer ``["TENSOR", dtype,
    shape]``, a scalar parameter (``var`` itself) ``["SCALAR", dtype, value]``."""
    analyzer = Analyzer()
    analyzer.bind(var, tirx.IntImm(str(var.ty.dtype), value))
    out: list[list[Any]] = []
    for param in func.params:
        if isinstance(param.ty, tirx.buffer.BufferType):
            shape = [int(analyzer.simplify(d)) for d in param.shape]
            out.append(["TENSOR", str(param.ty.dtype), shape])
        elif param.same_as(var):
            out.append(["SCALAR", str(param.ty.dtype), value])
        else:
            raise ValueError(f"no value for the scalar parameter {param.name}")
    return out


def static_key(range_key: str) -> str:
    """Where the bucket's static kernel, timed beside the range kernel ``range_key``, is
    stored: the rule prices the range kernel as the static kernel's record times the ratio
    of the two (both timed in one batch, under the same load; the record was timed during the
    search, under another)."""
    return f"{range_key}:static"


def is_default(trace: tvm.s_tir.Trace) -> bool:
    """Whether ``trace`` is the untuned default schedule (nothing but its postprocessing):
    its range kernel is the generic kernel."""
    return not any(inst.kind.name != "EnterPostproc" for inst in trace.insts)


def replay(trace: tvm.s_tir.Trace, mod: tvm.IRModule) -> tirx.PrimFunc | None:
    """``trace`` applied to ``mod`` (None when it does not replay)."""
    sch = tvm.s_tir.Schedule(mod)
    try:
        trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception:  # a record that no longer replays (another TVM): not used
        return None
    return sch.mod["main"]


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


def _first_symbolic_tile(
    trace: tvm.s_tir.Trace, base: tvm.IRModule, var_name: str
) -> tuple[bool, Any, int]:
    """Replay ``trace`` on ``base``: (whether it replays fully, the first SamplePerfectTile of a
    symbolic loop or None, ``c`` where that loop's extent is ``c * var``, else 1)."""
    sch = tvm.s_tir.Schedule(base)
    hit: list[tuple[Any, int]] = []

    def provider(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        symbolic = inst.kind.name == "SamplePerfectTile" and not hit
        extent = sch.get(inputs[0]).extent if symbolic else None
        if symbolic and not isinstance(extent, tirx.IntImm):
            hit.append((inst, coefficient(extent, var_name) or 1))
            raise _SymbolicTile(inst)  # stops the replay (crosses the FFI as an error)
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=provider)
    except Exception:  # _SymbolicTile arrives re-wrapped by the FFI
        return (False, *hit[0]) if hit else (False, None, 1)
    return True, None, 1


# A trace whose tilings of the symbolic loops are split ``[None, *inner]``, and its tile
Rewrite = tuple[tvm.s_tir.Trace, int]


def rewrite_tiles(
    func: tirx.PrimFunc, trace: tvm.s_tir.Trace, var_name: str, fine: bool = False
) -> Rewrite | None:
    """``trace`` with each tiling of a loop over ``var_name`` split as ``[None, *inner]``
    (:func:`_rewrite`), and the least common multiple of those inner tiles; None when the
    trace does not replay on ``func``. What :func:`transplant`, :func:`range_variants` and
    :func:`instances` start from (it replays the trace once per symbolic tiling: compute it
    once per record)."""
    tiles: list[int] = []
    base = tvm.IRModule({"main": func})
    # Find the SamplePerfectTile instructions on symbolic loops one at a time: replay the trace
    # on the symbolic kernel up to the first such tiling, rewrite it, start over. A loop over
    # ``c * var`` rows (``m * c * tile`` padded) divides by inner factors of product ``f`` for
    # every ``m`` when ``tile`` is a multiple of ``f / gcd(f, c)``.
    for _ in range(64):
        replays, hit, coef = _first_symbolic_tile(trace, base, var_name)
        if hit is None:
            if not replays:
                return None  # the trace fails on this kernel for another reason
            break
        trace, tile = _rewrite(trace, hit, fine)
        tiles.append(tile // math.gcd(tile, coef))
    else:
        return None
    return trace, math.lcm(*tiles) if tiles else 1


def instances(
    rewrite: Rewrite, points: list[int], bind: Callable[[int], tvm.IRModule | None]
) -> list[tuple[int, tirx.PrimFunc]]:
    """A record's schedule (``rewrite``: its :func:`rewrite_tiles`) applied to its kernel at
    other constant values (``points``; ``bind(value)``: the kernel bound there): *static
    instances*, with constant extents (so every loop vectorizes and unrolls as the bucket's
    own kernel did) doing a value's work. The symbolic loops' tilings keep their tuned inner
    factors with the outer factor free (as in :func:`transplant`), so only the points that
    are multiples of their tile get one, and none that would need a predicate or does not
    replay. Records that do not transplant (a softmax vectorized across ``n``) get them
    too."""
    trace, tile = rewrite
    out = []
    for value in points:
        bound = bind(value) if value % tile == 0 else None
        kernel = replay(trace, bound) if bound is not None else None
        if kernel is not None and "T.where(" not in kernel.script():
            out.append((value, kernel))
    return out


def instance_points(lower: int, bucket: int) -> list[int]:
    """Where a bucket's static instances go between the bucket below it (``lower``, 0 for
    none) and ``bucket``: a grid of at most 3 points per gap, a power of two apart
    (64..128: 80, 96, 112; 16..64: 32, 48; 0..16: 4, 8, 12), the same for every kernel of
    the gap so that their dispatch regions coincide."""
    step = 1 << max(0, math.ceil(math.log2(max(1, (bucket - lower) / 4))))
    start = max(2, (lower // step + 1) * step)  # (at 1 a layout kernel is a view: no call)
    return list(range(start, bucket, step))


def transplant(
    func: tirx.PrimFunc, trace: tvm.s_tir.Trace, var_name: str, fine: bool = False
) -> RangeKernel | None:
    """Make a range kernel of symbolic ``func`` from a trace tuned at a static size.

    ``fine``: each tiling of a symbolic loop keeps only its innermost (register) factor, so
    the kernel pads a value to a smaller tile at the price of the dropped cache tiles (see
    :func:`range_variants`). Returns None when the trace cannot be transplanted onto the
    kernel.
    """
    return _padded(func, rewrite_tiles(func, trace, var_name, fine), var_name)


def _padded(func: tirx.PrimFunc, rewrite: Rewrite | None, var_name: str) -> RangeKernel | None:
    """The range kernel of ``rewrite`` (:func:`transplant`)."""
    if rewrite is None:
        return None
    trace, base_tile = rewrite
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


def range_variants(
    func: tirx.PrimFunc, trace: tvm.s_tir.Trace, var_name: str, rewrite: Rewrite | None
) -> tuple[RangeKernel, ...]:
    """The range kernels a bucket's record gives (``rewrite``: its :func:`rewrite_tiles`):
    its transplant (:func:`transplant`) and, where it pads to a smaller tile, its *fine*
    transplant, which keeps only the register tile of each symbolic loop. A value between
    two buckets pays for the larger bucket's tile: BERT's ``q @ k^T`` tuned at s=128 has a
    tile of 32 or more, so s=100 computes 128 x 128 scores; the fine kernel computes about
    100 x 100 at the price of the cache tiles it dropped, and the tune times both
    (:mod:`tuner.job.probes`) so that the build's rule can weigh one against the other
    at every value. Empty when the record does not transplant."""
    coarse = _padded(func, rewrite, var_name)
    if coarse is None:
        return ()
    fine = transplant(func, trace, var_name, fine=True)
    if fine is None or fine.tile >= coarse.tile:
        return (coarse,)
    return (coarse, fine)
