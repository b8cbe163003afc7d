"""The known matrix-product tiling (:mod:`tuner.search.gemm`): which kernels get it and which
decisions of the search's own sketch it sets (that a task's first round measures it and its
builds compute the product: tests/tuner/search/test_matvec.py)."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from tests.tuner.search.products import product_kernel, spaces
from tuner.search.gemm import gemm_block, gemm_traces, register_blocks


def test_only_a_matrix_product_gets_the_tiling(llvm_target) -> None:
    assert gemm_block(product_kernel(64, 128, 256)["main"]) == (64, 256, 128)
    assert gemm_block(product_kernel(16, 128, 64, bias=True)["main"]) == (16, 64, 128)
    assert gemm_block(product_kernel(1, 128, 64)["main"]) is None  # a matrix-vector product
    assert gemm_block(product_kernel(4, 128, 64)["main"]) is None  # too few rows
    assert gemm_block(product_kernel(16, 32, 64)["main"]) is None  # too short a reduction
    # attention's scores: a product per head (batch extent 4), not one matrix product
    q = tvm.te.placeholder((4, 16, 64), name="q")
    k = tvm.te.placeholder((4, 64, 64), name="k")
    r = tvm.te.reduce_axis((0, 64), name="r")
    scores = tvm.te.compute(
        (4, 16, 64), lambda h, i, j: tvm.te.sum(q[h, i, r] * k[h, r, j], axis=r), name="s"
    )
    assert gemm_block(tvm.te.create_prim_func([q, k, scores])) is None
    n = tirx.Var("n", "int64")
    x = tvm.te.placeholder((n, 64), name="x")
    total = tvm.te.compute((n, 64), lambda i, j: tvm.te.sum(x[i, r], axis=r), name="t")
    assert gemm_block(tvm.te.create_prim_func([x, total])) is None  # symbolic rows
    decode = product_kernel(1, 128, 64)
    assert gemm_traces(decode["main"], spaces(decode, llvm_target), 2, AVX2) == []


def _tilings(trace: Any) -> list[list[int]]:
    insts = [i for i in trace.insts if i.kind.name == "SamplePerfectTile"]
    return [[int(v) for v in trace.decisions[i]] for i in insts]


AVX2 = ((2, 32), (4, 16))


def test_register_blocks_fill_half_the_vector_registers() -> None:
    """Four vectors wide, as many rows as half the registers hold, then twice the rows at half
    the width: by the target's vector width and register count."""

    def blocks(**attrs: str) -> tuple[tuple[int, int], ...]:
        return register_blocks(tvm.target.Target({"kind": "llvm", **attrs}))

    assert blocks(mcpu="znver4") == ((4, 64), (8, 32))  # AVX-512: 32 registers of 16 floats
    assert blocks(mcpu="haswell") == AVX2  # 16 registers of 8 floats
    assert blocks(mtriple="aarch64-linux-gnu", mcpu="neoverse-n1") == ((4, 16), (8, 8))


def test_the_tiling_is_a_column_band_per_core_and_a_register_block(llvm_target) -> None:
    """Every row inside one column band per core, its column blocks inside each pass over the
    weight; register blocks of 2 x 32 and 4 x 16 floats over 32 rows of the weight (decisions
    of the sketch, so the search can mutate them)."""
    mod = product_kernel(64, 896, 256)
    traces = gemm_traces(mod["main"], spaces(mod, llvm_target), 2, AVX2)
    assert [t[1:] for t in map(_tilings, traces)] == [
        [[1, 1, 32, 2], [2, 1, 4, 32], [28, 32]],
        [[1, 1, 16, 4], [2, 1, 8, 16], [28, 32]],
    ]
    assert all(_tilings(t)[0] == [1, 1, 1, 1] for t in traces)  # the unit batch loop
    odd = product_kernel(18, 100, 96)  # 18 rows: only 2 divides; 96 columns: 2 x 16 does not
    (one,) = gemm_traces(odd["main"], spaces(odd, llvm_target), 3, AVX2)
    assert _tilings(one)[1:] == [[1, 1, 9, 2], [3, 1, 1, 32], [25, 4]]
