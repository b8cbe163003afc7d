"""A fixed CPU schedule for kernels over several symbolic variables, which no bucket tunes.

The dispatch tunes a kernel per bucket of one variable; a kernel over two (a decoder's
attention over the prompt and the context) runs its untuned code. One pattern there is
slow for a reason no tuning is needed to see: ``probs @ V``, a sum over the long symbolic
axis (the context) with a short static spatial axis innermost (the head dimension), reads
``V`` a column at a time, one accumulator per output. :func:`reduction_outer` moves the
reduction loops out of that spatial loop, so the inner loop walks rows of ``V`` and a row of
accumulators with unit stride, and vectorizes it; the result is unchanged for every value of
every variable (same sums, each in the same order). The scores ``q @ k^T`` (a short static
reduction innermost, the context as the spatial axis) are left as they are: moving their
reduction out would re-read the whole output row per step.

On the decoder of ``make demo-llm`` (CPU, 1 thread) ``probs @ V`` took 14.4 ms at a
256-token prompt and 0.28 ms scheduled, 132 us and 4.6 us at a 1008-token context.
"""

from __future__ import annotations

import tvm
from tvm import tirx

MAX_LANES = 64  # the innermost static spatial extent vectorized whole (a head dimension)


def reduction_outer(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """``func`` with every block of the ``probs @ V`` pattern rescheduled (see the module
    docstring); None when no block has it."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    changed = False
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        changed |= _reorder(sch, block)
    return sch.mod["main"] if changed else None


def _reorder(sch: tvm.s_tir.Schedule, block: tvm.s_tir.SBlockRV) -> bool:
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    if len(loops) != len(iters) or len(loops) < 2:
        return False  # scheduled already, or not one loop per block variable
    kinds = ["R" if iv.iter_type == tirx.IterVar.CommReduce else "S" for iv in iters]
    first_r = kinds.index("R") if "R" in kinds else len(kinds)
    if first_r == 0 or "S" in kinds[first_r:] or first_r == len(kinds):
        return False  # not spatial loops then reduction loops
    inner = sch.get(loops[first_r - 1]).extent
    reduced = [sch.get(loop).extent for loop in loops[first_r:]]
    if not isinstance(inner, tirx.IntImm) or int(inner) > MAX_LANES:
        return False
    if all(isinstance(ext, tirx.IntImm) for ext in reduced):
        return False  # a short static reduction: left innermost
    if not _indexes_last(sch.get(block), iters[first_r - 1].var):
        return False
    spatial = loops[first_r - 1]
    sch.reorder(*loops[first_r:], spatial)
    sch.vectorize(spatial)
    sch.decompose_reduction(block, sch.get_loops(block)[first_r - 1])
    return True


def _indexes_last(block: tirx.SBlock, var: tirx.Var) -> bool:
    """Whether the block writes one buffer, indexed by ``var`` in its last dimension."""
    if len(block.writes) != 1:
        return False
    last = block.writes[0].region[-1].min
    return isinstance(last, tirx.Var) and last.same_as(var)
