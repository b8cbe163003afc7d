"""The copies a bucket branch adds around its kernel: pad each input along the variable's
axes in one pass, crop the output back to the variable's extent in one pass.

Each is a small TIR kernel of its own, serial (a parallel loop's thread-pool wake-up costs
~5 µs a call on a 2-core VM, more than the copy), its inner loop left to LLVM to vectorize.
Measured in the VM on a 2-core AMD EPYC (TVM 0.27), padding ``probs[1, 2, 100, 100]`` to
128 x 128 and cropping it back takes 2.8 µs this way; the pad alone, as the zeros-and-concat
per axis that ``LegalizeOps`` emits, took 13.8 µs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


class CopyKernels:
    """The pad and crop kernels of a module, added to ``bb`` once per buffer layout."""

    def __init__(self, bb: relax.BlockBuilder) -> None:
        self.bb = bb
        self._gvs: dict[tuple, relax.GlobalVar] = {}

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

    def crop(self, x: relax.Expr, extents: dict[int, tvm.ir.PrimExpr]) -> relax.Expr:
        """``x`` cropped to ``extents`` (axis: extent) from index 0 (not emitted)."""
        ty = x.ty
        axes = sorted(extents)
        key = ("crop", *self._layout(ty, axes))
        gv = self._gv(key, lambda: crop_kernel(ty.shape.values, axes, ty.dtype))
        shape = [extents.get(i, d) for i, d in enumerate(ty.shape.values)]
        return relax.call_tir(gv, [x], relax.TensorType(shape, ty.dtype))
