"""Per-record feature cache in the ``record_features`` table.

Replaying a stored trace and extracting its features costs milliseconds per record, so a warm
start over 10^4 records would spend minutes before its first round. Features are stored once
per record as raw float32 bytes with their shape (never pickles) and read back by
:func:`tuner.cost_model.dataset.load_dataset`. A row is used only when its feature version
and workload are the record's; otherwise the record is replayed and its row replaced.

Writing is best effort: a read-only database (a schedule pack, a read-only PostgreSQL role)
serves the features it has and computes the others every time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from database import Storage
from database.errors import DatabaseError
from database.models import RecordFeatures
from tuner.cost_model.features import FEATURE_VERSION, WIDTH

log = logging.getLogger("tunefarm.cost_model")

CHUNK = 2000  # ids per IN (...) query and rows per insert


@dataclass(frozen=True)
class CachedFeatures:
    """One record's features: the ranker's row and the per-store matrix."""

    workload_id: int
    pooled: np.ndarray  # [WIDTH] float32
    per_store: np.ndarray  # [stores, 164] float32


def _f32(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype="<f4").tobytes()


def read_features(
    storage: Storage, ids: Sequence[int], version: int = FEATURE_VERSION
) -> dict[int, CachedFeatures]:
    """Cached features of the records ``ids`` at ``version`` (absent ids are not cached).

    An unreadable table (a role without access to it) reads as an empty cache.
    """
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
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            query = select(*cols).where(
                RecordFeatures.record_id.in_(chunk), RecordFeatures.feature_version == version
            )
            for rid, wid, pooled, per_store, rows, ncols in storage.run(
                lambda s, q=query: list(s.execute(q)), write=False
            ):
                x = np.frombuffer(pooled, dtype="<f4")
                stores = np.frombuffer(per_store, dtype="<f4")
                if x.size != WIDTH or stores.size != rows * ncols:
                    continue  # a row this layout cannot read: recompute it
                out[rid] = CachedFeatures(wid, x, stores.reshape(rows, ncols))
    except DatabaseError as err:
        log.info("cost model: feature cache not readable (%s); replaying traces", err)
        return {}
    return out


def store_features(
    storage: Storage,
    rows: Iterable[tuple[int, int, np.ndarray, np.ndarray]],
    version: int = FEATURE_VERSION,
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
        for start in range(0, len(values), CHUNK):
            chunk = values[start : start + CHUNK]
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
        log.info("cost model: features not cached (%s)", err)
    return stored
