"""A known-good point of MetaSchedule's own CPU space for a matrix product, measured in a
task's first round.

A decoder's prefill (and an encoder's every layer) spends its time in ``[M, K] @ [K, N]``
products with ``M`` the prompt's tokens: compute-bound, so what counts is a register block
that keeps the FMA units busy and a loop order that reads the weight from memory once, in
runs the hardware prefetcher can follow. The multi-level sketch (``SSRSRS``: ``i0 j0 | i1 j1 |
k0 | i2 j2 | k1 | i3 j3``) holds such a point, but it is a narrow one: the sketch's parallel
loop fuses every outer spatial loop, so a tiling with rows outside the columns (``i1 > 1``)
streams the whole weight once per row block (17 MB from memory sixteen times for a 0.5B
decoder's MLP at 64 tokens), and a random sample seldom avoids it. :func:`gemm_traces` sets
the sketch's decisions to: one column band per core (``j0`` = cores), every row inside it
(``i0 = i1 = 1``, ``i2 = M / i3``), the band's column blocks inside each pass over the weight's
rows (``j1 = 1``, ``j2`` = blocks), and a register block of ``i3 x j3`` accumulators (half the
vector registers: :func:`register_blocks`) over ``k1`` = 32 rows of the weight.

The column blocks inside the pass matter when the weight comes from memory, as a large
model's does at every call: a pass then reads 32 whole rows of the band (long runs of
addresses), where one column block at a time (``j1`` = blocks) read 128 or 256 bytes per row,
a row apart, which the prefetcher does not follow. Measured on a 2-core Xeon (AVX-512), 2
threads, float32, the weight cold (one of 30 copies per call), ms (columns outside the pass
/ inside; PyTorch's ``x @ W``): ``[64, 896] @ [896, 4864]`` 4 x 64: 3.47 / 3.06, 8 x 32: 4.38
/ 2.82 (2.84); ``[64, 4864] @ [4864, 896]`` 3.55 / 3.49, 4.29 / 3.19 (2.49); ``[256, 896] @
[896, 4864]`` 10.2 / 10.1, 11.7 / 9.2 (8.2). With the weight hot both orders were within 10%.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from tuner.search.matvec import MIN_EXTENT, decided, plain_sketch, product_block

MIN_ROWS = 8  # fewer rows: a matrix-vector product's tiling is the better start
DEPTHS = (32, 64, 16, 8, 4, 2, 1)  # rows of the weight per register-block pass: the first
# that divides K


def register_blocks(target: tvm.target.Target) -> tuple[tuple[int, int], ...]:
    """The register blocks (rows, columns) to try on ``target``'s CPU, best first: half its
    vector registers as accumulators, four vectors wide (AVX-512: 4 x 64 floats; AVX2: 2 x 32;
    NEON: 4 x 16), then twice the rows at half the width."""
    from tvm.target import codegen

    def has(feature: str) -> bool:
        try:
            return bool(codegen.llvm_cpu_has_features(feature, target))
        except Exception:  # a target LLVM cannot answer for: the narrowest guess
            return False

    wide = has("avx512f")
    lanes = 16 if wide else 8 if has("avx2") or has("avx") else 4
    arm = "aarch64" in str(target.attrs.get("mtriple", "")) or has("neon")
    registers = 32 if wide or arm else 16
    rows = max(1, registers // 8)  # registers / 2 accumulators, 4 vectors a row
    return (rows, 4 * lanes), (2 * rows, 2 * lanes)


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
    func: tirx.PrimFunc,
    spaces: list[tvm.s_tir.Schedule],
    threads: int,
    blocks: tuple[tuple[int, int], ...],
) -> list[tvm.s_tir.Trace]:
    """The register ``blocks`` (rows, columns; :func:`register_blocks`) that divide ``M`` and
    ``N`` (a column band per core, its blocks inside each pass over the weight) as decisions of
    the plain multi-level sketch among ``spaces``; none when ``func`` is not a matrix product
    or no sketch has that form."""
    shape = gemm_block(func)
    sketch = plain_sketch(spaces, func)
    if shape is None or sketch is None:
        return []
    m, n, k = shape
    cores = max(1, threads)
    depth = next(d for d in DEPTHS if k % d == 0)
    out = []
    for rows, cols in blocks:
        if m % rows == 0 and n % (cores * cols) == 0:
            m_tiles = [1, 1, m // rows, rows]
            n_tiles = [cores, 1, n // (cores * cols), cols]
            out.append(decided(sketch, [m_tiles, n_tiles, [k // depth, depth]]))
    return out
