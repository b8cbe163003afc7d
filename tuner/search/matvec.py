"""A known-good point of MetaSchedule's own CPU space for a matrix-vector product, measured in
a task's first round.

A decoder at batch 1 spends its decode step in matrix-vector products (``[1, K] @ [K, N]``:
every projection at one token). Each reads its weight once and does two flops per element
loaded, so the only goal is to stream the weight at the memory's speed on every core. At the few
trials a task a job can give (a 0.5B decoder has about twenty decode tasks), the evolutionary
search keeps schedules that stream at half to two thirds of that. One tiling of the search's own
multi-level sketch does it without search: the output split into one contiguous column block
per core, each block's rows walked a few at a time (eight rows of the weight in flight, what
keeps the memory busy) by a vectorized loop over the columns. :func:`matvec_traces` sets the
sketch's decisions to that tiling (two variants), so the search measures them first, keeps
them only if they win, and mutates them like any of its own (a hand-written schedule outside
the space has no decisions to mutate and stalls the search: measured, the 0.5B decoder's decode
step ran 1.04x slower after 64 trials seeded that way than unseeded).

Measured on a 2-core AMD EPYC (Zen 1, 8 MB L3), 2 threads, the weight flushed from the caches
before each run (float32, Qwen2-0.5B's shapes; GB/s of weight streamed): ``[896] @ [896, 4864]``
21.3, ``[4864] @ [4864, 896]`` 20.6, the 544 MB head ``[896] @ [896, 151936]`` 20.5, against
PyTorch's ``x @ W`` at 16.1, 13.5 and 18.0 GB/s and the untuned kernel at 1.8.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from tuner.symbolic.rangekernel import blocks_in_order

MIN_EXTENT = 64  # a smaller weight is not worth a seed: the search finds its own at once
ROWS = (8, 4, 2, 1)  # rows of the weight in flight: the first that divides K
UNROLL = 64  # the sketch's unroll limit (one of its categorical choices)
# (column blocks per thread, vector lanes): one block a core, two AVX2 registers wide; four a
# core, one register wide
VARIANTS = ((1, 16), (4, 8))


def product_block(func: tirx.PrimFunc) -> tuple[list[int], int] | None:
    """``(spatial extents, K)`` when ``func``'s only reduction block is a product: static
    spatial extents, then one static reduction (``K``) last; else None."""
    found = [
        block
        for block in blocks_in_order(func)
        if any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars)
    ]
    if len(found) != 1:
        return None
    iters = found[0].iter_vars
    kinds = ["R" if iv.iter_type == tirx.IterVar.CommReduce else "S" for iv in iters]
    if len(kinds) < 2 or kinds[-1] != "R" or kinds.count("R") != 1:
        return None
    extents = [iv.dom.extent for iv in iters]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    *spatial, k = (int(e.value) for e in extents)
    return spatial, k


def matvec_block(func: tirx.PrimFunc) -> tuple[int, int] | None:
    """``(N, K)`` when ``func`` is a matrix-vector product, else None: its only reduction block
    has every spatial extent static and 1 but the last (``N``), then one static reduction
    (``K``), both at least :data:`MIN_EXTENT`."""
    found = product_block(func)
    if found is None:
        return None
    (*rows, n), k = found
    if any(r != 1 for r in rows) or n < MIN_EXTENT or k < MIN_EXTENT:
        return None
    return n, k


def matvec_traces(
    func: tirx.PrimFunc, spaces: list[tvm.s_tir.Schedule], threads: int
) -> list[tvm.s_tir.Trace]:
    """The tilings of :data:`VARIANTS` (those that divide ``N``) as decisions of the plain
    multi-level sketch among ``spaces`` (the task's design spaces); none when ``func`` is not
    a matrix-vector product or no sketch has that form."""
    shape = matvec_block(func)
    sketch = plain_sketch(spaces, func)
    if shape is None or sketch is None:
        return []
    n, k = shape
    rows = next(r for r in ROWS if k % r == 0)
    out = []
    for per_thread, lanes in VARIANTS:
        blocks = max(1, threads) * per_thread
        if n % (blocks * lanes) == 0:
            n_tiles = [blocks, 1, n // (blocks * lanes), lanes]
            out.append(decided(sketch, [n_tiles, [k // rows, rows]]))
    return out


def _tiles(trace: tvm.s_tir.Trace) -> list[Any]:
    return [inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]


def plain_sketch(spaces: list[tvm.s_tir.Schedule], func: tirx.PrimFunc) -> Any:
    """The trace of the multi-level sketch among ``spaces`` without a cache write or an rfactor
    (one 4-level tiling per spatial loop of the block, then a 2-level one of the reduction);
    None when there is none."""
    for space in spaces:
        trace = space.trace
        names = {inst.kind.name for inst in trace.insts}
        if names & {"RFactor", "CacheWrite", "CacheRead"}:
            continue
        tiles = [int(inst.attrs[0]) for inst in _tiles(trace)]
        if len(tiles) >= 2 and tiles[-1] == 2 and all(t == 4 for t in tiles[:-1]):
            return trace
    return None


def decided(trace: tvm.s_tir.Trace, last: list[list[int]]) -> tvm.s_tir.Trace:
    """``trace`` with its last tilings decided as ``last`` (the loops before them untiled) and
    unroll :data:`UNROLL` where the sketch offers it."""
    insts = _tiles(trace)
    ones, given = insts[: len(insts) - len(last)], insts[len(insts) - len(last) :]
    for inst in ones:
        trace = trace.with_decision(inst, [1] * int(inst.attrs[0]), remove_postproc=True)
    for inst, tiles in zip(given, last, strict=True):
        trace = trace.with_decision(inst, tiles, remove_postproc=True)
    for inst in trace.insts:
        if inst.kind.name == "SampleCategorical":
            choices = [int(c) for c in inst.attrs[0]]
            if UNROLL in choices:
                trace = trace.with_decision(inst, choices.index(UNROLL), remove_postproc=True)
    return trace
