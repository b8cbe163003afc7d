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


def bucket_distance(a: dict[str, int], b: dict[str, int]) -> float:
    """How far two buckets are: summed |log2| ratio over the variables (missing: far)."""
    out = 0.0
    for var in set(a) | set(b):
        if var not in a or var not in b:
            out += 64.0
        else:
            out += abs(math.log2(max(1, a[var])) - math.log2(max(1, b[var])))
    return out
