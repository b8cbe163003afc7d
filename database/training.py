"""What the cost model and the planner read from the schedule database (and the feature cache
they write): training rows, workload summaries, stored traces, per-workload histories and the
``record_features`` table. Every query of theirs lives here, so the tuner holds no SQL.

Features are stored once per record as raw float32 bytes with their shape (never pickles). A
cached row is used only when its feature version and workload are the record's. Writing is
best effort: a read-only database (a schedule pack, a read-only PostgreSQL role) serves the
features it has and the caller computes the others every time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import case, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from database.errors import DatabaseError
from database.models import EMPTY_TRACE, RecordFeatures, RecordRow, WorkloadRow
from database.storage import Storage

log = logging.getLogger("tunefarm.database")

CHUNK = 2000  # ids per IN (...) query and rows per insert


@dataclass(frozen=True)
class WorkloadSummary:
    """A workload as training sees it: row id, structural hash, task name, family, bucket."""

    id: int
    shash: str
    task_name: str | None
    family: str | None
    bucket: dict[str, int] | None


@dataclass(frozen=True)
class CachedFeatures:
    """One record's features: the ranker's row and the per-store matrix."""

    workload_id: int
    pooled: np.ndarray  # [width] float32
    per_store: np.ndarray  # [stores, cols] float32


def _target_filter(query: Any, kind: str, arch: str | None) -> Any:
    query = query.where(RecordRow.target_kind == kind)
    if arch is None:
        return query.where(RecordRow.target_arch.is_(None))
    return query.where(RecordRow.target_arch == arch)


def _chunks(ids: Sequence[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


def record_stats(
    storage: Storage, kind: str, arch: str | None, after_id: int = 0
) -> tuple[int, int]:
    """(count, max id) of the schedules of a target kind and arch first measured after
    ``after_id`` with a valid first record (each counted by that record, as
    :func:`training_rows` gives it one row): a re-measurement of an older schedule (a
    confirmation, a job's end-of-job re-timing) is no new training row, so it does not make a
    model trained up to ``after_id`` stale."""
    earlier = RecordRow.__table__.alias("earlier")
    first = (
        select(earlier.c.id)
        .where(
            earlier.c.workload_id == RecordRow.workload_id,
            earlier.c.target_key == RecordRow.target_key,
            earlier.c.candidate_hash == RecordRow.candidate_hash,
            earlier.c.id < RecordRow.id,
        )
        .exists()
    )
    query = _target_filter(
        select(func.count(RecordRow.id), func.max(RecordRow.id)).where(
            RecordRow.mean_sec.is_not(None), RecordRow.id > after_id, ~first
        ),
        kind,
        arch,
    )
    count, max_id = storage.run(lambda s: s.execute(query).one())
    return int(count or 0), int(max_id or 0)


def workload_summaries(
    storage: Storage, ids: Sequence[int] | None = None
) -> dict[int, WorkloadSummary]:
    """The workloads ``ids`` (default: all), by row id."""
    query = select(
        WorkloadRow.id,
        WorkloadRow.shash,
        WorkloadRow.task_name,
        WorkloadRow.family_shash,
        WorkloadRow.bucket_json,
    )
    if ids is not None:
        query = query.where(WorkloadRow.id.in_(list(ids)))
    rows = storage.run(lambda s: list(s.execute(query)), write=False)
    return {
        r[0]: WorkloadSummary(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None)
        for r in rows
    }


def training_rows(
    storage: Storage,
    kind: str,
    arch: str | None,
    *,
    workload_ids: Sequence[int] | None = None,
    max_records: int | None = None,
    include_failed: bool = True,
    after_id: int = 0,
) -> list[tuple[int, int, float | None]]:
    """(record id, workload id, mean seconds or None) of a target kind and arch, newest
    first: the newest ``max_records`` schedules whose first record's id is > ``after_id``.

    One row per schedule (workload, target, candidate), however often it was measured: its
    first record's id (whose features stand for all of them) and the mean of its valid
    records' means (None when every one failed), so a re-measured schedule weighs as one.
    """
    query = _target_filter(
        select(func.min(RecordRow.id), RecordRow.workload_id, func.avg(RecordRow.mean_sec)),
        kind,
        arch,
    )
    query = query.group_by(
        RecordRow.workload_id, RecordRow.target_key, RecordRow.candidate_hash
    ).order_by(func.max(RecordRow.id).desc())
    if after_id:  # schedules first measured after it (a later re-measurement is no new row)
        query = query.having(func.min(RecordRow.id) > after_id)
    if not include_failed:
        query = query.where(RecordRow.mean_sec.is_not(None))
    if workload_ids is not None:
        query = query.where(RecordRow.workload_id.in_(list(workload_ids)))
    if max_records is not None:
        query = query.limit(max_records)
    rows = storage.run(lambda s: list(s.execute(query)), write=False)
    return [(r[0], r[1], None if r[2] is None else float(r[2])) for r in rows]


def record_traces(storage: Storage, ids: Sequence[int]) -> list[tuple[int, int, str, str, str]]:
    """(record id, workload id, trace JSON, args info JSON, target JSON) of records ``ids``,
    by id."""
    out: list[Any] = []
    for chunk in _chunks(ids):
        q = select(
            RecordRow.id,
            RecordRow.workload_id,
            RecordRow.trace_json,
            RecordRow.args_info_json,
            RecordRow.target_json,
        ).where(RecordRow.id.in_(chunk))
        out.extend(storage.run(lambda s, q=q: list(s.execute(q)), write=False))
    return sorted((tuple(r) for r in out), key=lambda r: r[0])


def workload_mods(storage: Storage, ids: Sequence[int]) -> dict[int, str]:
    """The IRModule JSON of workloads ``ids``, by row id."""
    q = select(WorkloadRow.id, WorkloadRow.mod_json).where(WorkloadRow.id.in_(list(ids)))
    return dict(storage.run(lambda s: list(s.execute(q)), write=False))


def records_of_candidates(
    storage: Storage, target_key: str, candidate_hashes: Sequence[str]
) -> list[tuple[int, int, str, str]]:
    """(record id, workload id, workload shash, candidate hash) of the records of
    ``target_key`` whose candidate is one of ``candidate_hashes``."""
    rows: list[Any] = []
    for chunk in _chunks(candidate_hashes):
        query = (
            select(RecordRow.id, RecordRow.workload_id, WorkloadRow.shash, RecordRow.candidate_hash)
            .join(WorkloadRow, WorkloadRow.id == RecordRow.workload_id)
            .where(RecordRow.target_key == target_key, RecordRow.candidate_hash.in_(chunk))
        )
        rows.extend(storage.run(lambda s, q=query: list(s.execute(q)), write=False))
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def record_histories(
    storage: Storage, target_key: str
) -> list[tuple[int, str | None, bool, float | None]]:
    """Every schedule of ``target_key`` in the order it was first measured, per workload:
    (workload id, family shash, whether it is the untuned default, mean seconds or None).
    A schedule measured in several records is one trial: the mean of its valid records'
    means, at its first record's place."""
    query = (
        select(
            RecordRow.workload_id,
            func.min(WorkloadRow.family_shash),
            func.max(case((RecordRow.trace_json == EMPTY_TRACE, 1), else_=0)),
            func.avg(RecordRow.mean_sec),
        )
        .join(WorkloadRow, WorkloadRow.id == RecordRow.workload_id)
        .where(RecordRow.target_key == target_key)
        .group_by(RecordRow.workload_id, RecordRow.candidate_hash)
        .order_by(RecordRow.workload_id, func.min(RecordRow.id))
    )
    rows = storage.run(lambda s: list(s.execute(query)), write=False)
    return [(r[0], r[1], bool(r[2]), None if r[3] is None else float(r[3])) for r in rows]


# ------------------------------------------------------------------ the feature cache
def _f32(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype="<f4").tobytes()


def read_features(
    storage: Storage, ids: Sequence[int], version: int, width: int
) -> dict[int, CachedFeatures]:
    """Cached features of the records ``ids`` at ``version`` whose pooled row has ``width``
    values (absent ids are not cached). An unreadable table (a role without access to it)
    reads as an empty cache."""
    out: dict[int, CachedFeatures] = {}
    cols = (
        RecordFeatures.record_id,
        RecordFeatures.workload_id,
        RecordFeatures.pooled,
        RecordFeatures.per_store,
        RecordFeatures.per_store_rows,
        RecordFeatures.per_store_cols,
    )
    try:
        for chunk in _chunks(ids):
            query = select(*cols).where(
                RecordFeatures.record_id.in_(chunk), RecordFeatures.feature_version == version
            )
            for rid, wid, pooled, per_store, rows, ncols in storage.run(
                lambda s, q=query: list(s.execute(q)), write=False
            ):
                x = np.frombuffer(pooled, dtype="<f4")
                stores = np.frombuffer(per_store, dtype="<f4")
                if x.size != width or stores.size != rows * ncols:
                    continue  # a row this layout cannot read: recompute it
                out[rid] = CachedFeatures(wid, x, stores.reshape(rows, ncols))
    except DatabaseError as err:
        log.info("feature cache not readable (%s); the caller recomputes", err)
        return {}
    return out


def store_features(
    storage: Storage,
    rows: Iterable[tuple[int, int, np.ndarray, np.ndarray]],
    version: int,
) -> int:
    """Store (record id, workload id, pooled, per_store) rows, replacing any older row.

    Best effort: returns how many were stored; on a read-only database nothing is written,
    and a failed write (a read-only role, a record deleted meanwhile) is logged, never raised.
    """
    values = [
        {
            "record_id": int(rid),
            "workload_id": int(wid),
            "feature_version": version,
            "pooled": _f32(pooled),
            "per_store": _f32(per_store),
            "per_store_rows": int(per_store.shape[0]) if per_store.ndim == 2 else 0,
            "per_store_cols": int(per_store.shape[1]) if per_store.ndim == 2 else 0,
        }
        for rid, wid, pooled, per_store in rows
    ]
    if not values or storage.read_only:
        return 0
    insert = pg_insert if storage.dialect == "postgresql" else sqlite_insert
    table = RecordFeatures.__table__
    stored = 0
    try:
        for chunk in _chunks(values):
            stmt = insert(table)
            stmt = stmt.on_conflict_do_update(
                index_elements=[table.c.record_id],
                set_={
                    name: stmt.excluded[name]
                    for name in (
                        "workload_id",
                        "feature_version",
                        "pooled",
                        "per_store",
                        "per_store_rows",
                        "per_store_cols",
                    )
                },
            )
            storage.run(lambda s, st=stmt, c=chunk: s.execute(st, c))
            stored += len(chunk)
    except DatabaseError as err:
        log.info("features not cached (%s)", err)
    return stored
