"""TVM's ``ExportedProgramImporter`` with every tensor's symbolic shape restored from the
exported program, and failures that name the node they came from.

TVM's importer derives each result's shape from its Relax operator alone; where two symbolic
extents are not provably equal (``min(s, 512)`` from slicing a 512-long buffer to ``s``,
broadcasting ``[1, s, H]`` against such a slice) the result keeps only its ``ndim`` and
legalization fails later ("emit_te now only supports Tensor that has ShapeExpr shape"). The
exported program knows every node's shape: ``node.meta["val"]`` is a fake tensor whose sizes
are sympy expressions over the input symbols. :class:`ShapeRestoringImporter` wraps each
operator's converter, and where the converter's result has no shape, or one that differs from
torch's, it emits ``R.match_cast(result, R.Tensor(torch_shape))``; a symbolic integer node
(``sym_size``) gets torch's expression. This module imports torch; import it lazily.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import tvm
from torch import fx
from tvm import relax
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from tuner.symbolic.walk import vars_of


class NodeImportError(Exception):
    """A converter failed on ``node``; ``cause`` is the original exception."""

    def __init__(self, node: fx.Node, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


def op_name(node: fx.Node) -> str:
    """``aten.add.Tensor`` for an ATen node, the callable's name otherwise."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def describe_node(node: fx.Node) -> str:
    """Where a node comes from in the user's model: its name, the module that made it
    (``encoder.layer.0.attention.self: BertSelfAttention``) and the source line."""
    parts = [f"node {node.name}"]
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, cls = list(stack.values())[-1]
        cls = str(getattr(cls, "__name__", cls)).rsplit(".", 1)[-1]
        if not str(path).startswith("_empty_nn_module_stack"):
            parts.append(f"in {path or '<model>'} ({cls})")
    line = _user_line(node.meta.get("stack_trace") or "")
    if line:
        parts.append(f"at {line}")
    return " ".join(parts)


def _user_line(trace: str) -> str:
    """``modeling_bert.py:99`` for the last frame of a stack trace that is not torch's own."""
    frames = [ln.strip() for ln in trace.splitlines() if ln.strip().startswith('File "')]
    torch_dir = os.path.dirname(torch.__file__)
    for frame in reversed(frames):
        try:
            path = frame.split('"')[1]
            lineno = frame.split(", line ")[1].split(",")[0]
        except IndexError:
            continue
        if not path.startswith(torch_dir):
            return f"{os.path.basename(path)}:{lineno}"
    return ""


class ShapeRestoringImporter(ExportedProgramImporter):
    """``ExportedProgramImporter`` that restores torch's symbolic shapes (module docstring).

    ``var_nodes`` maps the name of each Relax variable bound to a node's result to that node,
    so a later failure on a binding can be traced back to the user's model.
    """

    def __init__(self) -> None:
        super().__init__()
        self.symbols: dict[str, tvm.tirx.Var] = {}
        self.var_nodes: dict[str, fx.Node] = {}
        self.restored = 0
        self.bounded = tvm.sym.Analyzer()  # knows each symbol's range

    # ------------------------------------------------------------------ inputs

    def create_input_vars(self, exported_program: Any) -> tuple:
        out = super().create_input_vars(exported_program)
        for group in out[:2]:
            for name, sym in vars_of(group.values()).items():
                self.symbols.setdefault(name, sym)
        for name, (lower, upper) in out[2].items():
            if name in self.symbols:
                hi = upper if upper is not None else 2**62
                self.bounded.update(self.symbols[name], tvm.sym.ConstIntBound(lower, hi))
        return out

    def _cumsum(self, node: fx.Node) -> Any:
        """``cumsum`` of a bool or small integer tensor sums in int64, as torch does (TVM's
        converter sums in the input's dtype: bool additions fail in LLVM codegen)."""
        val = node.meta.get("val")
        x = self.env[node.args[0]]
        if "dtype" in node.kwargs or not isinstance(val, torch.Tensor):
            return super()._cumsum(node)
        dtype = self._convert_data_type(val.dtype)
        if dtype == x.ty.dtype:
            return super()._cumsum(node)
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        return self.block_builder.emit(relax.op.cumsum(x, dim, dtype))

    def _slice(self, node: fx.Node) -> Any:
        """A slice provably within its tensor (with the symbols' ranges) is emitted with
        ``assume_inbound``: its extent is ``end - start`` instead of TVM's clamped
        ``min(max(if_then_else(...)))``, which later passes cannot handle."""
        x = self.env[node.args[0]]
        ty = x.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            return super()._slice(node)
        args = [self.env[a] if isinstance(a, fx.Node) else a for a in node.args]
        dim = args[1] if len(args) > 1 else 0
        start = args[2] if len(args) > 2 and args[2] is not None else 0
        end = args[3] if len(args) > 3 and args[3] is not None else sys.maxsize
        step = args[4] if len(args) > 4 else 1
        if not (isinstance(dim, int) and isinstance(step, int) and step >= 1):
            return super()._slice(node)
        dim = dim + ty.ndim if dim < 0 else dim
        extent = ty.shape.values[dim]
        bounds = []
        for value in (start, end):
            if isinstance(value, int):
                if value >= sys.maxsize:
                    value = extent
                elif value < 0:
                    value = extent + value
                else:
                    value = tvm.tirx.IntImm("int64", value)
            if not tvm.ir.is_prim_expr(value):
                return super()._slice(node)
            bounds.append(value)
        begin, stop = bounds
        prove = self.bounded.can_prove
        if not (prove(begin >= 0) and prove(begin <= stop) and prove(stop <= extent)):
            return super()._slice(node)
        if step == 1 and self.bounded.can_prove_equal(begin, 0) and _equal(stop, extent):
            return x
        return self.block_builder.emit(
            relax.op.strided_slice(x, [dim], [begin], [stop], [step], assume_inbound=True)
        )

    def _check_unsupported_func_type(self, nodes: list[fx.Node]) -> None:
        for node in nodes:
            if node.op == "call_function" and node.target.__name__ not in self.convert_map:
                missing = sorted(
                    {
                        n.target.__name__
                        for n in nodes
                        if n.op == "call_function" and n.target.__name__ not in self.convert_map
                    }
                )
                raise NodeImportError(
                    node, NotImplementedError(f"Unsupported function types {missing}")
                )

    # ------------------------------------------------------------------ converters

    def create_convert_map(self) -> dict[str, Callable[[fx.Node], Any]]:
        return {name: self._wrap(fn) for name, fn in super().create_convert_map().items()}

    def _wrap(self, convert: Callable[[fx.Node], Any]) -> Callable[[fx.Node], Any]:
        def run(node: fx.Node) -> Any:
            try:
                result = convert(node)
                result = self._restore(node, result)
            except NodeImportError:
                raise
            except Exception as err:
                raise NodeImportError(node, err) from err
            if isinstance(result, relax.Var):
                self.var_nodes.setdefault(result.name, node)
            return result

        return run

    def _restore(self, node: fx.Node, result: Any) -> Any:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and tvm.ir.is_prim_expr(result):
            expr = self.to_tir(val.node.expr)
            return result if expr is None else expr
        if not isinstance(val, torch.Tensor) or not isinstance(result, relax.Expr):
            return result
        ty = result.ty
        if not isinstance(ty, relax.TensorType) or ty.ndim != len(val.shape):
            return result
        shape = []
        for dim in val.shape:
            expr = self.to_tir(dim.node.expr) if isinstance(dim, torch.SymInt) else int(dim)
            if expr is None:
                return result
            shape.append(expr)
        if ty.shape is not None and all(
            _equal(a, b) for a, b in zip(ty.shape.values, shape, strict=True)
        ):
            return result
        self.restored += 1
        if ty.shape is not None:
            # erase the importer's shape first: FuseTIR (TVM 0.27) segfaults on a match_cast
            # between two different shape expressions, not on one from an ndim-only tensor
            result = self.block_builder.match_cast(
                result, relax.TensorType(None, ty.dtype, ndim=ty.ndim)
            )
        return self.block_builder.match_cast(result, relax.TensorType(shape, ty.dtype))

    def to_tir(self, expr: Any) -> tvm.tirx.PrimExpr | None:
        """A sympy size expression over the input symbols as TIR (int64), or None when it
        uses a symbol the inputs do not define or a function TIR cannot express."""
        import sympy
        from torch.utils._sympy.functions import CleanDiv, FloorDiv, Max, Min, Mod, PythonMod

        if isinstance(expr, (int, sympy.Integer)):
            return tvm.tirx.IntImm("int64", int(expr))
        if isinstance(expr, sympy.Symbol):
            return self.symbols.get(str(expr))
        args = [self.to_tir(a) for a in expr.args]
        if any(a is None for a in args):
            return None
        if isinstance(expr, sympy.Add):
            return _fold(args, lambda a, b: a + b)
        if isinstance(expr, sympy.Mul):
            return _fold(args, lambda a, b: a * b)
        if isinstance(expr, (FloorDiv, CleanDiv)):
            return tvm.tirx.floordiv(args[0], args[1])
        if isinstance(expr, (Mod, PythonMod)):
            return tvm.tirx.floormod(args[0], args[1])
        if isinstance(expr, (Max, sympy.Max)):
            return _fold(args, tvm.tirx.max)
        if isinstance(expr, (Min, sympy.Min)):
            return _fold(args, tvm.tirx.min)
        if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and expr.exp > 0:
            return _fold([args[0]] * int(expr.exp), lambda a, b: a * b)
        return None


def _fold(args: list, op: Callable) -> tvm.tirx.PrimExpr:
    out = args[0]
    for arg in args[1:]:
        out = op(out, arg)
    return out


def _equal(a: tvm.tirx.PrimExpr, b: tvm.tirx.PrimExpr) -> bool:
    """Equal as written (up to simplification without bounds): ``min(s, 512)`` is not
    ``s`` here, so such a shape is replaced by torch's."""
    if isinstance(a, tvm.tirx.IntImm) and isinstance(b, tvm.tirx.IntImm):
        return int(a) == int(b)
    if tvm.ir.prim.expr_deep_equal(a, b):
        return True
    return bool(_ANALYZER.can_prove_equal(a, b))


_ANALYZER = tvm.sym.Analyzer()


def normalize_slice_axes(mod: tvm.IRModule) -> tvm.IRModule:
    """``strided_slice`` with negative axes (torch's ``x[..., a:b]``, ``dim=-1``) made
    non-negative: TVM 0.27's legalization of a symbolic slice fails on a negative axis
    ("Check failed: axis < src_tensor_dim (-1 vs. 2)")."""
    op = tvm.ir.Op.get("relax.strided_slice")

    @relax.expr_functor.mutator
    class _Normalize(relax.PyExprMutator):
        def visit_call_(self, call: relax.Call) -> relax.Expr:
            call = super().visit_call_(call)
            if not (isinstance(call, relax.Call) and call.op.same_as(op)):
                return call
            ty, axes = call.args[0].ty, call.args[1]
            if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
                return call
            if not isinstance(axes, relax.Tuple) or not all(
                isinstance(a, tvm.tirx.IntImm) for a in axes.fields
            ):
                return call
            values = [int(a) for a in axes.fields]
            if all(v >= 0 for v in values):
                return call
            return relax.op.strided_slice(
                call.args[0],
                [v + ty.ndim if v < 0 else v for v in values],
                *call.args[2:],
                assume_inbound=bool(call.attrs.assume_inbound),
            )

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = _Normalize(mod).visit_expr(func)
    return out


def import_program(ep: Any, *, keep_params: bool) -> tuple[tvm.IRModule, ShapeRestoringImporter]:
    """``tvm.relax.frontend.torch.from_exported_program`` with the shape-restoring importer
    (core ATen decompositions first, as TVM's own entry point does)."""
    ep = ep.run_decompositions()
    importer = ShapeRestoringImporter()
    mod = importer.from_exported_program(ep, keep_params, False, False, None)
    return normalize_slice_axes(mod), importer
