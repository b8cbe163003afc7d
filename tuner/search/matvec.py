"""Known-good CPU schedules of a matrix-vector product, measured in a task's first round.

A decoder at batch 1 spends its decode step in matrix-vector products (``[1, K] @ [K, N]``:
every projection at one token). Each reads its weight once and does two flops per element
loaded, so the only goal is to stream the weight at the memory's speed on every core. The
evolutionary search gets there slowly: at a few trials a task it keeps schedules that run at a
third to a half of that, and the untuned kernel streams at a tenth. One schedule needs no
search: split the reduction over ``K`` into a few contiguous parts (``rfactor``) run in
parallel, each a vectorized loop over whole rows of the weight (unit stride, what hardware
prefetchers follow), then sum the parts. :func:`matvec_traces` gives that schedule for a
task's kernel (two part counts), as traces: the search measures them first, like any seed, and
keeps them only if they win.

Measured on a 2-core AMD EPYC (Zen 1, 8 MB L3), 2 threads, weights flushed from the caches
before each run (float32, Qwen2-0.5B's shapes): ``[896] @ [896, 4864]`` 20.3 GB/s,
``[4864] @ [4864, 896]`` 23.5 GB/s, the 544 MB head ``[896] @ [896, 151936]`` 18.4 GB/s, against
PyTorch's ``x @ W`` (same layout) at 16.1, 13.5 and 18.0 GB/s, and the untuned kernel at 1.8.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from tuner.symbolic.rangekernel import blocks_in_order

VECTOR = 16  # floats of the vectorized inner loop over the output (two AVX2 registers)
MIN_EXTENT = 64  # a smaller weight is not worth a seed: the search finds its own at once


def matvec_block(func: tirx.PrimFunc) -> str | None:
    """The name of ``func``'s matrix-vector block, or None when it has none.

    The block: the only reduction block of the kernel, unscheduled (one loop per block
    variable), every spatial extent static and 1 but the last (``N``, a multiple of
    :data:`VECTOR`), then one static reduction (``K``), both at least :data:`MIN_EXTENT`.
    """
    found = [
        block
        for block in blocks_in_order(func)
        if any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars)
    ]
    if len(found) != 1:
        return None
    iters = found[0].iter_vars
    kinds = ["R" if iv.iter_type == tirx.IterVar.CommReduce else "S" for iv in iters]
    if kinds[-1:] != ["R"] or kinds.count("R") != 1 or len(kinds) < 2:
        return None
    extents = [iv.dom.extent for iv in iters]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    *rows, n, k = (int(e.value) for e in extents)
    if any(r != 1 for r in rows) or n < MIN_EXTENT or n % VECTOR or k < MIN_EXTENT:
        return None
    return str(found[0].name_hint)


def matvec_traces(mod: tvm.IRModule, threads: int) -> list[tvm.s_tir.Trace]:
    """The reduction split into ``2 * threads`` and ``threads`` parts (in that order; those
    that divide ``K``), as traces of ``mod``'s ``main``; none when ``main`` is not a
    matrix-vector product (:func:`matvec_block`)."""
    name = matvec_block(mod["main"])
    if name is None:
        return []
    out = []
    for parts in dict.fromkeys((2 * max(1, threads), max(1, threads))):
        sch = tvm.s_tir.Schedule(mod)
        if _split_reduction(sch, name, parts):
            out.append(sch.trace)
    return out


def _split_reduction(sch: tvm.s_tir.Schedule, name: str, parts: int) -> bool:
    """``parts`` row ranges of the weight reduced in parallel into partial outputs, then
    summed; False when ``parts`` does not divide the reduction or the kernel refuses."""
    block = sch.get_sblock(name)
    *spatial, n, k = sch.get_loops(block)
    extent = int(sch.get(k).extent)
    if parts < 2 or extent % parts:
        return False
    try:
        outer, inner = sch.split(k, [parts, extent // parts])
        sch.reorder(outer, *spatial, inner, n)
        partial = sch.rfactor(outer, 0)
        loops = sch.get_loops(partial)  # outer (the part), the spatial ones, inner, n
        sch.parallel(loops[0])
        sch.vectorize(sch.split(loops[-1], [None, VECTOR])[1])
        outer, *spatial, n = sch.get_loops(block)  # the sum of the parts
        n_outer, lanes = sch.split(n, [None, VECTOR])
        sch.reorder(*spatial, n_outer, outer, lanes)
        sch.vectorize(lanes)
    except tvm.s_tir.ScheduleError:
        return False
    return True
