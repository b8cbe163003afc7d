"""A known-good point of MetaSchedule's own CPU space for a matrix product, measured in a
task's first round.

A decoder's prefill (and an encoder's every layer) spends its time in ``[M, K] @ [K, N]``
products with ``M`` the prompt's tokens: compute-bound, so what counts is a register block
that keeps the FMA units busy and a loop order that reads the weight from memory once. The
multi-level sketch (``SSRSRS``: ``i0 j0 | i1 j1 | k0 | i2 j2 | k1 | i3 j3``) holds such a
point, but it is a narrow one: the sketch's parallel loop fuses every outer spatial loop, so a
tiling with rows outside the columns (``i1 > 1``) streams the whole weight once per row block
(17 MB from memory sixteen times for a 0.5B decoder's MLP at 64 tokens), and a random
sample seldom avoids it. :func:`gemm_traces` sets the sketch's decisions to: one column band
per core (``j0`` = cores), every row inside it (``i0 = i1 = 1``, ``i2 = M / i3``), a register
block of ``i3 x j3`` accumulators (2 x 32 or 4 x 16 floats: eight AVX2 registers) over
``k1`` = 32 rows of the weight (a slice of it reused by every row block from L1).

Measured on a 2-core AMD EPYC (Zen 1), 2 threads, float32, GFLOP/s of the 2 x 32 block (the
4 x 16 one; PyTorch's ``x @ W``; the untuned kernel): ``[64, 896] @ [896, 4864]`` 67 (59; 104;
1.4), ``[64, 4864] @ [4864, 896]`` 64 (57; 110; 0.7), ``[256, 896] @ [896, 4864]`` 92 (65; 131;
1.4), ``[16, 896] @ [896, 1152]`` 77 (57; 84; 1.6). The best of 60 random decisions of the same
sketch reached 52 on the first.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from tuner.search.matvec import MIN_EXTENT, decided, plain_sketch, product_block

MIN_ROWS = 8  # fewer rows: a matrix-vector product's tiling is the better start
DEPTHS = (32, 64, 16, 8, 4, 2, 1)  # rows of the weight per register-block pass: the first
# that divides K
BLOCKS = ((2, 32), (4, 16))  # register blocks (rows, columns): eight 8-float registers each


def gemm_block(func: tirx.PrimFunc) -> tuple[int, int, int] | None:
    """``(M, N, K)`` when ``func`` is a matrix product, else None: its only reduction block has
    static spatial extents, all 1 but the last two (``M`` >= :data:`MIN_ROWS`, ``N``), then one
    static reduction (``K``); ``N`` and ``K`` at least :data:`MIN_EXTENT`. A batched product
    (attention's, one per head) is not one: its batch extent is not 1."""
    found = product_block(func)
    if found is None:
        return None
    spatial, k = found
    if len(spatial) < 2 or any(e != 1 for e in spatial[:-2]):
        return None
    m, n = spatial[-2:]
    if m < MIN_ROWS or n < MIN_EXTENT or k < MIN_EXTENT:
        return None
    return m, n, k


def gemm_traces(
    func: tirx.PrimFunc, spaces: list[tvm.s_tir.Schedule], threads: int
) -> list[tvm.s_tir.Trace]:
    """The register blocks of :data:`BLOCKS` that divide ``M`` and ``N`` (a column band per
    core) as decisions of the plain multi-level sketch among ``spaces``; none when ``func`` is
    not a matrix product or no sketch has that form."""
    shape = gemm_block(func)
    sketch = plain_sketch(spaces, func)
    if shape is None or sketch is None:
        return []
    m, n, k = shape
    cores = max(1, threads)
    depth = next(d for d in DEPTHS if k % d == 0)
    out = []
    for rows, cols in BLOCKS:
        if m % rows == 0 and n % (cores * cols) == 0:
            m_tiles = [1, 1, m // rows, rows]
            n_tiles = [cores, n // (cores * cols), 1, cols]
            out.append(decided(sketch, [m_tiles, n_tiles, [k // depth, depth]]))
    return out
