"""The copies a bucket branch adds around its kernel: pad each input along the variable's
axes in one pass, crop the output back to the variable's extent in one pass.

Each is a small TIR kernel of its own, serial (a parallel loop's thread-pool wake-up costs
~5 µs a call on a 2-core VM, more than the copy), its inner loop left to LLVM to vectorize.
Measured in the VM on a 2-core AMD EPYC (TVM 0.27), padding ``probs[1, 2, 100, 100]`` to
128 x 128 and cropping it back takes 2.8 µs this way; the pad alone, as the zeros-and-concat
per axis that ``LegalizeOps`` emits, took 13.8 µs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import tvm
from tvm import relax, te, tirx


def _shapes(
    shape: Sequence[tvm.ir.PrimExpr], axes: Sequence[int]
) -> tuple[list[tvm.ir.PrimExpr], list[tvm.ir.PrimExpr]]:
    """A kernel's (narrow, wide) buffer shapes: constant dims kept, every other dim a fresh
    variable shared by both buffers, and each padded axis a variable of its own in each (so
    one kernel serves every extent, each bound from its buffer at the call)."""
    narrow, wide = [], []
    for i, d in enumerate(shape):
        if i in axes:
            narrow.append(tirx.Var(f"n{i}", "int64"))
            wide.append(tirx.Var(f"p{i}", "int64"))
        else:
            dim = d if isinstance(d, tirx.IntImm) else tirx.Var(f"d{i}", "int64")
            narrow.append(dim)
            wide.append(dim)
    return narrow, wide


def _kernel(args: list[te.Tensor], name: str) -> tirx.PrimFunc:
    func = te.create_prim_func(args).without_attr("global_symbol")
    return func.with_attr("tirx.is_scheduled", True).with_attr("tunefarm.copy", name)


def pad_kernel(
    shape: Sequence[tvm.ir.PrimExpr], axes: Sequence[int], dtype: str, value: float
) -> tirx.PrimFunc:
    """``out = x`` padded with ``value`` along ``axes`` (each to ``out``'s extent there)."""
    narrow, wide = _shapes(shape, axes)
    x = te.placeholder(narrow, dtype, "x")
    fill = tirx.const(value, dtype)

    def body(*idx: tirx.Var) -> tvm.ir.PrimExpr:
        inside = tirx.all(*[idx[a] < narrow[a] for a in axes])
        return tirx.if_then_else(inside, x(*idx), fill)

    return _kernel([x, te.compute(wide, body, name="pad")], "pad")


def crop_kernel(shape: Sequence[tvm.ir.PrimExpr], axes: Sequence[int], dtype: str) -> tirx.PrimFunc:
    """``out = full[..., :n, ...]`` along ``axes`` (``out``'s extent there)."""
    narrow, wide = _shapes(shape, axes)
    full = te.placeholder(wide, dtype, "full")
    return _kernel([full, te.compute(narrow, lambda *idx: full(*idx), name="crop")], "crop")


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_RESHAPE = tvm.ir.Op.get("relax.reshape")
_ANALYZER = tvm.sym.Analyzer()


def provably_equal(a: tvm.ir.PrimExpr, b: tvm.ir.PrimExpr) -> bool:
    return bool(_ANALYZER.can_prove_equal(a, b))


def cut_axes(wide: Sequence[tvm.ir.PrimExpr], narrow: Sequence[tvm.ir.PrimExpr]) -> list[int]:
    """The axes along which ``narrow`` is not provably ``wide``'s extent."""
    return [
        i for i, (a, b) in enumerate(zip(wide, narrow, strict=True)) if not provably_equal(a, b)
    ]


# where a cropped tensor came from: (the padded tensor, the cropped one's shape padded as it
# is, the reshapes that lead from the one to the other; shapes as lists of PrimExprs)
PaddedSource = tuple[relax.Expr, list[Any], list[list[Any]]]


def padded_to(found: PaddedSource, x: relax.Expr, extents: dict[int, tvm.ir.PrimExpr]) -> bool:
    """Whether the padded tensor ``found`` that ``x`` was cropped from is padded exactly along
    the axes of ``extents``, to those extents."""
    wide = found[1]
    if cut_axes(wide, list(x.ty.shape.values)) != sorted(extents):
        return False
    return all(provably_equal(wide[i], e) for i, e in extents.items())


def _reshaped(
    narrow: list[tvm.ir.PrimExpr], wide: list[tvm.ir.PrimExpr], target: list[tvm.ir.PrimExpr]
) -> list[tvm.ir.PrimExpr] | None:
    """``target`` (a reshape of ``narrow``) for the padded ``wide``, when ``narrow`` differs
    from ``wide`` on one axis, ``target`` has one axis that is not a constant, that one is the
    same dim, and the constant dims before it and after it hold as many elements in both."""
    cut = cut_axes(wide, narrow)
    open_ = [i for i, d in enumerate(target) if not isinstance(d, tirx.IntImm)]
    if len(cut) != 1 or len(open_) != 1 or not provably_equal(narrow[cut[0]], target[open_[0]]):
        return None
    (a,), (b,) = cut, open_
    dims = [*narrow[:a], *narrow[a + 1 :], *target[:b], *target[b + 1 :]]
    if not all(isinstance(d, tirx.IntImm) for d in dims):
        return None

    def prod(ds: list[tvm.ir.PrimExpr]) -> int:
        return math.prod(int(d) for d in ds)

    if prod(narrow[:a]) != prod(target[:b]) or prod(narrow[a + 1 :]) != prod(target[b + 1 :]):
        return None
    return [*target[:b], wide[a], *target[b + 1 :]]


class CopyKernels:
    """The pad and crop kernels of a module, added to ``bb`` once per buffer layout."""

    def __init__(self, bb: relax.BlockBuilder) -> None:
        self.bb = bb
        self._gvs: dict[tuple, relax.GlobalVar] = {}
        self.reuse_padded = True  # whether uncropped() may hand a padded tensor on

    def _gv(self, key: tuple, make: Callable[[], tirx.PrimFunc]) -> relax.GlobalVar:
        """The kernel of ``key``, made and added on first use."""
        if key not in self._gvs:
            self._gvs[key] = self.bb.add_func(make(), f"tunefarm_{key[0]}{len(self._gvs)}")
        return self._gvs[key]

    @staticmethod
    def _layout(ty: relax.TensorType, axes: Sequence[int]) -> tuple:
        dims = [int(d) if isinstance(d, tirx.IntImm) else None for d in ty.shape.values]
        return (tuple(dims), tuple(axes), ty.dtype)

    def pad(
        self,
        builder: relax.BlockBuilder,
        x: relax.Expr,
        extents: dict[int, tvm.ir.PrimExpr],
        value: float,
    ) -> relax.Expr:
        """Emit ``x`` padded with ``value`` to ``extents`` (axis: padded extent)."""
        ty = x.ty
        axes = sorted(extents)
        key = ("pad", *self._layout(ty, axes), float(value))
        gv = self._gv(key, lambda: pad_kernel(ty.shape.values, axes, ty.dtype, value))
        shape = [extents.get(i, d) for i, d in enumerate(ty.shape.values)]
        return builder.emit(relax.call_tir(gv, [x], relax.TensorType(shape, ty.dtype)))

    def uncropped(
        self, builder: relax.BlockBuilder, x: relax.Expr, extents: dict[int, tvm.ir.PrimExpr]
    ) -> relax.Expr | None:
        """The tensor ``x`` was cropped from, padding and all, when it is padded to ``extents``
        on exactly those axes; else None. ``x`` is a crop bound in ``builder``'s current block,
        or reshapes of one (``[s, H]`` to ``[1, s, H]``, ``[1, s, 2, 64]``) that keep one
        padded axis whole, with as many elements before it and after it in both shapes: those
        are then emitted on the padded tensor, so its padded rows stay the padded rows."""
        found = self.padded_source(builder, x)
        if found is None or not padded_to(found, x, extents):
            return None
        return self.reopened(builder, found)

    @staticmethod
    def reopened(builder: relax.BlockBuilder, found: PaddedSource) -> relax.Expr:
        """The padded tensor of ``found`` (:meth:`padded_source`) in ``x``'s layout: its
        reshapes emitted on it."""
        full, _, steps = found
        for shape in steps:
            full = builder.emit(relax.op.reshape(full, shape))
        return full

    def padded_source(self, builder: relax.BlockBuilder, x: relax.Expr) -> PaddedSource | None:
        """Where ``x`` was cropped from: (the padded tensor, ``x``'s shape padded as it is,
        the reshapes that make the one of the other; see :meth:`uncropped`), or None."""
        if not self.reuse_padded:
            return None
        targets = []  # the reshapes from the crop out to x, outermost first
        value: relax.Expr | None = x
        while True:
            while isinstance(value, relax.Var):
                value = builder.lookup_binding(value)
            if not isinstance(value, relax.Call):
                return None
            if value.op.same_as(_RESHAPE):
                targets.append(list(value.ty.shape.values))
                value = value.args[0]
                continue
            break
        if not value.op.same_as(_CALL_TIR):
            return None
        callee = value.args[0]
        if not any(k[0] == "crop" and gv.same_as(callee) for k, gv in self._gvs.items()):
            return None
        (full,) = value.args[1].fields
        narrow, wide = list(value.ty.shape.values), list(full.ty.shape.values)
        steps = []
        for target in reversed(targets):
            step = _reshaped(narrow, wide, target)
            if step is None:
                return None
            steps.append(step)
            narrow, wide = target, step
        return full, wide, steps

    def crop(self, x: relax.Expr, extents: dict[int, tvm.ir.PrimExpr]) -> relax.Expr:
        """``x`` cropped to ``extents`` (axis: extent) from index 0 (not emitted)."""
        ty = x.ty
        axes = sorted(extents)
        key = ("crop", *self._layout(ty, axes))
        gv = self._gv(key, lambda: crop_kernel(ty.shape.values, axes, ty.dtype))
        shape = [extents.get(i, d) for i, d in enumerate(ty.shape.values)]
        return relax.call_tir(gv, [x], relax.TensorType(shape, ty.dtype))
