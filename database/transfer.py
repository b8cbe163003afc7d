"""Schedules learned at one shape bucket, offered to the search at another.

A symbolic kernel is tuned per bucket; each bucket is a static workload of the same *family*
(same symbolic PrimFunc, other extents). A trace tuned at one bucket usually does not replay
at another: its ``SamplePerfectTile`` decisions multiply to the old extent. :func:`adapt_trace`
replays it with every perfect-tile decision refitted to the new extent (inner factors kept
where they divide, the outer factor takes the rest), so the best schedules of nearby buckets
seed a new bucket's search: ``TuneFarmDatabase.get_top_k`` returns them after the workload's
own records, and MetaSchedule's evolutionary search starts its population from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tvm.ir import IRModule
from tvm.s_tir import Schedule, Trace


def refit_tile(factors: list[int], extent: int) -> list[int]:
    """Perfect-tile factors for ``extent`` close to ``factors`` (innermost kept first)."""
    new = [1] * len(factors)
    inner = 1
    for i in range(len(factors) - 1, 0, -1):
        g = math.gcd(int(factors[i]), extent // inner)
        new[i] = g
        inner *= g
    new[0] = extent // inner
    return new


def adapt_trace(trace: Trace, mod: IRModule) -> Trace | None:
    """``trace`` replayed on ``mod`` with refitted tile decisions; None if it cannot apply."""
    sch = Schedule(mod)

    def provider(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        if inst.kind.name == "SamplePerfectTile" and decision is not None:
            extent = sch.get(inputs[0]).extent
            if not hasattr(extent, "value"):
                return decision  # a symbolic extent: leave it to the replay to refuse
            return refit_tile([int(d) for d in decision], int(extent.value))
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception:  # a structure the family member does not share: no seed
        return None
    return sch.trace


def bucket_distance(a: Mapping[str, int] | None, b: Mapping[str, int] | None) -> float:
    """How far apart two buckets (symbolic variable -> value) of a kernel family are.

    The sum over their variables of ``|log2 a[v] - log2 b[v]|`` (values below 1 count as 1):
    doubling one variable costs 1, so ``{"n": 16}`` and ``{"n": 64}`` are 2 apart. Buckets
    that are not over the same variables (one lacks a variable the other has, or either is
    missing or empty) are not comparable: ``math.inf``. Sorted by distance, they come after
    every comparable bucket; as a training neighbour they get the weight of the farthest.
    """
    if not a or not b or set(a) != set(b):
        return math.inf
    return sum(abs(math.log2(max(1, a[v])) - math.log2(max(1, b[v]))) for v in a)
