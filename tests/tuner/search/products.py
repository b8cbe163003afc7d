"""The fused product kernels Relax makes of a decoder's projections, as a task's module, and
their design spaces (shared by the tests of the known tilings)."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax, tirx
from tvm.script import relax as R


def product_kernel(rows: int, k: int, n: int, bias: bool = False) -> tvm.IRModule:
    """The fused kernel Relax makes of ``x[1, rows, k] @ w[k, n] (+ b)``, as a task's module."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, rows, k), "float32"))
    w = relax.Var("w", R.Tensor((k, n), "float32"))
    b = relax.Var("b", R.Tensor((n,), "float32"))
    with bb.function("main", [x, w, b] if bias else [x, w]):
        with bb.dataflow():
            y = relax.op.matmul(x, w)
            out = bb.emit_output(bb.emit(relax.op.add(y, b) if bias else y))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    (func,) = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def spaces(mod: tvm.IRModule, target: tvm.target.Target) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply")
    return ctx.clone().generate_design_space()
