"""A fixed CPU schedule for kernels over several symbolic variables, which no bucket tunes.

The dispatch tunes a kernel per bucket of one variable; a kernel over two (a decoder's
attention over the prompt and the context: the scores, their softmax, the weighted sum of
values, the cache's concatenation) would run its untuned code, serial and as the operators
wrote it. Four steps no tuning is needed to see, each exact for every value of every variable
(the same sums, each in the same order), make it :func:`fixed_schedule`:

- **Elementwise steps inlined**: a block with one consumer that only maps elements (the causal
  mask's comparison, cast and scaling) is computed where its consumer reads it, not written to
  a buffer of ``rows x keys`` and read back.
- **Parallel over rows**: the leading loops down to the first symbolic one (batch, key heads,
  query rows; for the cache's copy, its positions) are fused into one parallel loop, every
  other block computed under it, so each thread owns whole rows: a decode step's 14 query rows
  (0.5B Qwen2) split over the cores, where the untuned code ran on one.
- **Reduction loop outermost** for ``probs @ V``, a sum over the
  long symbolic axis (the context) with a short static spatial axis innermost (the head
  dimension): the untuned loop reads ``V`` a column at a time, one accumulator per output; with
  the reduction loops moved out of that spatial loop, the inner loop walks rows of ``V`` and a
  row of accumulators with unit stride, vectorized.
- **Scores in key tiles** for ``q @ k^T`` (a short static reduction innermost, the keys as the
  spatial axis outside it), instead of parallel rows (:func:`_key_tiles`): a product of a
  tile of rows and a transposed, contiguous tile of keys, vectorized over the keys, the keys
  padded so no loop has a tail. A dot product per key, as untuned, is a horizontal sum per
  output; 1792 rows x 256 keys (a 256-token prefill's layer): 10.7 ms in parallel rows, 1.07
  ms in tiles.

Per layer of a 0.5B Qwen2 on 2 cores of a Xeon with AVX-512 (scores, softmax, ``probs @
V``): a decode step at context 1008 took 138, 58 and 958 us untuned (23 us with the reduction
outermost alone) and 72, 31 and 13 us fixed with the scores in parallel rows; a 256-token
prefill 9.4, 3.4 and 60 ms untuned and 4.7, 1.9 and 0.8 ms fixed (the key tiles' figures
above are from a Zen 4 VM).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import tirx

from tuner.symbolic.rangekernel import uses_var

MAX_LANES = 64  # the innermost static spatial extent vectorized whole (a head dimension)
KEY_TILE = 64  # keys per tile of the scores (one transposed tile: 64 x head dimension floats)
ROW_TILE = 64  # query rows per tile of the scores (each reuses the tile)
MAX_DOT = 256  # the longest static reduction (head dimension) the scores' tiling takes


@dataclass(frozen=True)
class FixedSchedule:
    """A kernel's fixed schedule and what it does (the build reports it per kernel)."""

    func: tirx.PrimFunc
    steps: tuple[str, ...]

    @property
    def label(self) -> str:
        return "; ".join(self.steps)


def fixed_schedule(func: tirx.PrimFunc) -> FixedSchedule | None:
    """``func`` with the steps of the module docstring that apply; None when none does, or
    when a step does not go through on a kernel of another shape (it keeps its generic code:
    the build never fails for want of this schedule)."""
    try:
        return _fixed_schedule(func)
    except tvm.s_tir.ScheduleError:
        return None


def _fixed_schedule(func: tirx.PrimFunc) -> FixedSchedule | None:
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    steps: list[str] = []
    if _inline_elementwise(sch):
        steps.append("elementwise steps inlined")
    reorders = [b for b in _root_blocks(sch) if _reorder(sch, b)]
    if _key_tiles(sch):
        steps.append("scores in key tiles")
    elif _parallel_rows(sch):
        steps.append("parallel over rows")
    for block in reorders:  # after the parallel loop: it needs the reduction undecomposed
        _vectorize_and_decompose(sch, block)
    if reorders:
        steps.append("reduction loop outermost")
    if steps:  # an initialisation inside the reduction's loop keeps LLVM from vectorizing it
        _decompose_reductions(sch)
    return FixedSchedule(sch.mod["main"], tuple(steps)) if steps else None


def _root_blocks(sch: tvm.s_tir.Schedule) -> list[tvm.s_tir.SBlockRV]:
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _inline_elementwise(sch: tvm.s_tir.Schedule) -> bool:
    """Inline every root block that maps elements into its only consumer, and an output
    block that maps elements into its only producer; whether any was."""
    changed = False
    blocks = _root_blocks(sch)
    for block in blocks[:-1]:
        if len(sch.get_consumers(block)) != 1 or not _spatial(sch, block):
            continue
        try:
            sch.compute_inline(block)
        except tvm.s_tir.ScheduleError:
            continue
        changed = True
    last = _root_blocks(sch)[-1]
    producers = sch.get_producers(last)
    if len(producers) == 1 and _spatial(sch, last) and _spatial(sch, producers[0]):
        try:
            sch.reverse_compute_inline(last)
            changed = True
        except tvm.s_tir.ScheduleError:
            pass
    return changed


def _data_par(sch: tvm.s_tir.Schedule, block: tvm.s_tir.SBlockRV) -> list[bool]:
    """Per block variable, whether it is spatial (else a reduction)."""
    return [iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(block).iter_vars]


def _spatial(sch: tvm.s_tir.Schedule, block: tvm.s_tir.SBlockRV) -> bool:
    return all(_data_par(sch, block))


def _parallel_rows(sch: tvm.s_tir.Schedule) -> bool:
    """Fuse the leading spatial loops, down to the first symbolic one, of the first reduction
    block (else of the output block) into a parallel loop, and compute every other root block
    under it; False (schedule unchanged) when that loop would hold the whole kernel's work or a
    block cannot follow."""
    blocks = _root_blocks(sch)
    anchor = next((i for i, b in enumerate(blocks) if not _spatial(sch, b)), len(blocks) - 1)
    loops = sch.get_loops(blocks[anchor])
    data_par = _data_par(sch, blocks[anchor])
    if len(loops) != len(data_par):
        return False
    lead = next(
        (i for i, loop in enumerate(loops) if not isinstance(sch.get(loop).extent, tirx.IntImm)),
        None,
    )
    if lead is None or lead == len(loops) - 1:
        return False  # static, or nothing inside the rows (an arange): not worth a thread
    if not all(data_par[: lead + 1]):
        return False

    def fuse_rows(attempt: tvm.s_tir.Schedule) -> None:
        fused = attempt.fuse(*attempt.get_loops(blocks[anchor])[: lead + 1])
        for block in reversed(blocks[:anchor]):
            attempt.compute_at(block, fused, preserve_unit_loops=True)
        for block in blocks[anchor + 1 :]:
            attempt.reverse_compute_at(block, fused, preserve_unit_loops=True)
        attempt.parallel(fused)

    return _on_a_copy_first(sch, fuse_rows, (tvm.s_tir.ScheduleError,))


def _on_a_copy_first(
    sch: tvm.s_tir.Schedule,
    steps: Callable[[tvm.s_tir.Schedule], None],
    errors: tuple[type[Exception], ...],
) -> bool:
    """Apply ``steps`` to a copy of ``sch``, then, when none raised one of ``errors``, to
    ``sch`` itself; whether they went through (else ``sch`` is unchanged)."""
    for attempt in (sch.copy(), sch):
        try:
            steps(attempt)
        except errors:
            return False
    return True


def _key_tiles(sch: tvm.s_tir.Schedule) -> bool:
    """Schedule a ``q @ k^T`` block (a short static reduction innermost, a symbolic spatial
    axis, the keys, just outside it) as products of tiles, exact at every length; whether the
    kernel has the pattern (else the schedule is unchanged).

    The keys are padded to a multiple of :data:`KEY_TILE` (``pad_einsum``: the sums of the
    padding are computed on zeros and never stored), so no key loop has a tail. Per tile of
    :data:`ROW_TILE` rows (batch, heads and row tiles fused in parallel) and ``KEY_TILE`` keys,
    the keys are copied transposed into a contiguous ``dot x KEY_TILE`` buffer; each row's sum
    runs over the dot product outside a vectorized loop over the tile's keys; the blocks after
    the scores (mask, scale) follow the tile."""
    blocks = _root_blocks(sch)
    first = next((i for i, b in enumerate(blocks) if not _spatial(sch, b)), None)
    if first != 0:
        return False
    kinds = _data_par(sch, blocks[0])
    loops = sch.get_loops(blocks[0])
    if len(loops) != len(kinds) or len(kinds) < 3 or kinds[-1] or not all(kinds[:-1]):
        return False
    dot, keys = (sch.get(loop).extent for loop in loops[-2:][::-1])
    if not isinstance(dot, tirx.IntImm) or int(dot) > MAX_DOT or isinstance(keys, tirx.IntImm):
        return False
    # a schedule primitive's error (RuntimeError), or another pattern (ValueError)
    return _on_a_copy_first(sch, lambda s: _tile_keys(s, len(kinds)), (RuntimeError, ValueError))


def _tile_keys(sch: tvm.s_tir.Schedule, n_loops: int) -> None:
    """:func:`_key_tiles`' steps on a kernel that has the pattern; raises where one fails."""
    name = sch.get(_root_blocks(sch)[0]).name_hint
    sch.pad_einsum(name, [1] * (n_loops - 2) + [KEY_TILE, 1])
    scores = sch.get_sblock(name)
    block = sch.get(scores)
    j_var, d_var = (iv.var for iv in block.iter_vars[-2:])
    keyed = [r for r in block.reads if any(uses_var(rng.min, j_var.name) for rng in r.region)]
    if len(block.reads) != 2 or len(keyed) != 1:
        raise ValueError("not a product of rows and keys")
    index = [rng.min for rng in keyed[0].region]
    by_key = [i for i, e in enumerate(index) if uses_var(e, j_var.name)]
    if not (index[-1].same_as(d_var) and len(by_key) == 1):
        raise ValueError("the keys' operand is not indexed by key, then dot")
    at_j = by_key[0]
    blocks = _root_blocks(sch)
    padded = [b for b in blocks if sch.get(b).writes[0].source.same_as(keyed[0].source)]
    if len(padded) != 1:
        raise ValueError("the keys were not padded")
    names = [sch.get(b).name_hint for b in blocks]
    after = blocks[names.index(name) + 1 :]
    if not after:
        raise ValueError("no copy of the padded scores")
    try:  # pad_einsum's copy of the padded scores into the unpadded ones
        sch.compute_inline(after[0])
        after = after[1:]
    except tvm.s_tir.ScheduleError:
        pass  # the scores are the output: the copy stays, under the tile
    *outer, rows, keys, dot = sch.get_loops(scores)
    row_o, row_i = sch.split(rows, [None, ROW_TILE])
    key_o, key_i = sch.split(keys, [None, KEY_TILE])
    sch.reorder(*outer, row_o, key_o, row_i, dot, key_i)
    sch.parallel(sch.fuse(*outer, row_o))
    sch.compute_at(padded[0], key_o)

    def transposed(*v: tirx.PrimExpr) -> list[tirx.PrimExpr]:  # (key, dot) -> (dot, key)
        rest = [e for i, e in enumerate(v[:-1]) if i != at_j]
        return [*rest, v[at_j] // KEY_TILE, v[-1], v[at_j] % KEY_TILE]

    sch.transform_layout(padded[0], ("write", 0), transposed)
    for later in after:
        sch.reverse_compute_at(later, key_o)
        sch.vectorize(sch.get_loops(later)[-1])
    sch.vectorize(key_i)
    init = sch.decompose_reduction(scores, dot)
    sch.vectorize(sch.get_loops(init)[-1])


def _reorder(sch: tvm.s_tir.Schedule, block: tvm.s_tir.SBlockRV) -> bool:
    """Move the long symbolic reduction of a ``probs @ V`` block out of its innermost
    static spatial loop; whether the block has the pattern."""
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
    sch.reorder(*loops[first_r:], loops[first_r - 1])
    return True


def _vectorize_and_decompose(sch: tvm.s_tir.Schedule, block: tvm.s_tir.SBlockRV) -> None:
    """Vectorize a reordered block's innermost (static spatial) loop; its reduction's
    initialisation goes before the first reduction loop."""
    loops = sch.get_loops(block)
    sch.vectorize(loops[-1])
    n_reduce = _data_par(sch, block).count(False)
    sch.decompose_reduction(block, loops[len(loops) - 1 - n_reduce])


def _decompose_reductions(sch: tvm.s_tir.Schedule) -> None:
    """Move the initialisation of each reduction block whose reduction loops are its innermost
    ones before the first of them."""
    for block in _root_blocks(sch):
        if _spatial(sch, block) or sch.get(block).init is None:
            continue
        loops = sch.get_loops(block)
        kinds = _data_par(sch, block)
        n_reduce = len(kinds) - kinds.index(False)
        if any(kinds[-n_reduce:]) or n_reduce > len(loops):
            continue  # a spatial variable inside the reduction: left as it is
        sch.decompose_reduction(block, loops[-n_reduce])


def _indexes_last(block: tirx.SBlock, var: tirx.Var) -> bool:
    """Whether the block writes one buffer, indexed by ``var`` in its last dimension."""
    if len(block.writes) != 1:
        return False
    last = block.writes[0].region[-1].min
    return isinstance(last, tirx.Var) and last.same_as(var)
