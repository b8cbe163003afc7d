"""Seeds across buckets: when a kernel has few records at its bucket, the search starts from
the best traces of the nearest other buckets of the same kernel family, refitted to it
(:func:`database.transfer.adapt_trace`)."""

from __future__ import annotations

import json
from typing import Any

import tvm
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from database.models import EMPTY_TRACE, RecordRow, WorkloadRow
from database.storage import Storage
from database.transfer import adapt_trace, bucket_distance


def sibling_seeds(
    storage: Storage,
    wid: int,
    mod: IRModule,
    target_key: str,
    limit: int,
    adapted: dict[tuple[int, str], Any],
) -> list[Any]:
    """Up to ``limit`` best traces of the nearest other buckets of workload ``wid``'s family
    on ``target_key``, refitted to ``mod`` (one query per call; ``adapted`` caches each
    refitted trace, None where it does not fit)."""

    def load(session: Session) -> tuple[Any, list[tuple[Any, ...]]]:
        me = session.get(WorkloadRow, wid)
        if me is None or me.family_shash is None or me.bucket_json is None:
            return None, []
        # one row per schedule (its records pooled by their mean: a confirmation or a
        # re-measurement is another record of the same schedule, never another seed)
        schedules = (
            select(
                RecordRow.workload_id,
                func.min(RecordRow.trace_json).label("trace_json"),
                func.avg(RecordRow.mean_sec).label("sec"),
            )
            .join(WorkloadRow, WorkloadRow.id == RecordRow.workload_id)
            .where(
                WorkloadRow.family_shash == me.family_shash,
                RecordRow.workload_id != wid,
                RecordRow.mean_sec.is_not(None),
                RecordRow.target_key == target_key,
                RecordRow.trace_json != EMPTY_TRACE,  # the untuned default: measured anyway
            )
            .group_by(RecordRow.workload_id, RecordRow.candidate_hash)
            .subquery()
        )
        best = select(
            schedules.c.workload_id,
            schedules.c.trace_json,
            func.row_number()
            .over(partition_by=schedules.c.workload_id, order_by=schedules.c.sec)
            .label("rank"),
        ).subquery()
        query = (
            select(WorkloadRow.bucket_json, WorkloadRow.mod_json, best.c.trace_json)
            .join(best, best.c.workload_id == WorkloadRow.id)
            .where(best.c.rank <= 4)
            .order_by(best.c.rank)  # best first within a bucket (the sort below is stable)
        )
        return json.loads(me.bucket_json), list(session.execute(query))

    bucket, rows = storage.run(load, write=False)
    out: list[Any] = []
    if bucket is not None:
        rows.sort(key=lambda r: bucket_distance(json.loads(r[0]), bucket))
        mods: dict[str, IRModule] = {}
        for _bucket, mod_json, trace_json in rows:
            if len(out) >= limit:
                break
            key = (wid, trace_json)
            if key not in adapted:
                if mod_json not in mods:
                    mods[mod_json] = tvm.ir.load_json(mod_json)
                adapted[key] = _adapt(trace_json, mods[mod_json], mod)
            if adapted[key] is not None:
                out.append(adapted[key])
    return out


def _adapt(trace_json: str, sibling: IRModule, mod: IRModule) -> Any:
    """Parse a sibling's trace against its own module, then refit it to ``mod``."""
    try:
        trace = TuningRecord.from_json(
            [json.loads(trace_json), None, None, None], Workload(sibling)
        ).trace
    except Exception:
        return None
    return adapt_trace(trace, mod)


def family_builds(
    storage: Storage, wid: int, target_key: str, limit: int
) -> list[tuple[str, float]]:
    """What the builds of workload ``wid``'s kernel family took on ``target_key``: up to
    ``limit`` of its records' (trace JSON, compile seconds), newest first, every bucket of
    the family (``wid`` alone when it has none); records without a build time (imported,
    measured before) and the untuned default are left out."""

    def load(session: Session) -> list[tuple[str, float]]:
        me = session.get(WorkloadRow, wid)
        if me is None:
            return []
        same = (
            WorkloadRow.family_shash == me.family_shash
            if me.family_shash is not None
            else WorkloadRow.id == wid
        )
        query = (
            select(RecordRow.trace_json, RecordRow.build_sec)
            .join(WorkloadRow, WorkloadRow.id == RecordRow.workload_id)
            .where(
                same,
                RecordRow.target_key == target_key,
                RecordRow.build_sec > 0,
                RecordRow.trace_json != EMPTY_TRACE,
            )
            .order_by(RecordRow.id.desc())
            .limit(limit)
        )
        return [(t, float(s)) for t, s in session.execute(query)]

    return storage.run(load, write=False)
