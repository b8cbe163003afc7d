"""Cost-model snapshots in the schedule database: save, find the latest, list.

A snapshot is data: XGBoost's own UBJSON bytes plus JSON metadata, never a pickle. Databases
created before the snapshot table existed get it on first use (an additive ``CREATE TABLE``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import tvm
from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import CostModelSnapshot, utcnow
from database.storage import Storage


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot row without its blob (for listings)."""

    id: int
    created_at: Any
    target_kind: str
    target_arch: str | None
    format_version: int
    tvm_version: str
    xgboost_version: str
    feature_version: int
    n_records: int
    trained_on: dict[str, Any]
    metrics: dict[str, Any]
    created_by: str | None
    size: int


def _info(row: CostModelSnapshot) -> SnapshotInfo:
    def parse(text: str | None) -> dict[str, Any]:
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    return SnapshotInfo(
        id=row.id,
        created_at=row.created_at,
        target_kind=row.target_kind,
        target_arch=row.target_arch,
        format_version=row.format_version,
        tvm_version=row.tvm_version,
        xgboost_version=row.xgboost_version,
        feature_version=row.feature_version,
        n_records=row.n_records,
        trained_on=parse(row.trained_on),
        metrics=parse(row.metrics_json),
        created_by=row.created_by,
        size=len(row.model_blob or b""),
    )


def save_snapshot(
    storage: Storage,
    *,
    target_kind: str,
    target_arch: str | None,
    model_blob: bytes,
    format_version: int,
    xgboost_version: str,
    feature_version: int,
    n_records: int,
    trained_on: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    created_by: str | None = None,
) -> int:
    """Store a snapshot; returns its id."""

    def insert(session: Session) -> int:
        row = CostModelSnapshot(
            created_at=utcnow(),
            target_kind=target_kind,
            target_arch=target_arch,
            format_version=format_version,
            tvm_version=tvm.__version__,
            xgboost_version=xgboost_version,
            feature_version=feature_version,
            n_records=n_records,
            trained_on=json.dumps(trained_on, sort_keys=True),
            metrics_json=json.dumps(metrics or {}, sort_keys=True),
            model_blob=bytes(model_blob),
            created_by=created_by,
        )
        session.add(row)
        session.flush()
        return row.id

    return storage.run(insert)


def _where(query: Any, target_kind: str | None, target_arch: str | None) -> Any:
    if target_kind is not None:
        query = query.where(CostModelSnapshot.target_kind == target_kind)
        if target_arch is None:
            query = query.where(CostModelSnapshot.target_arch.is_(None))
        else:
            query = query.where(CostModelSnapshot.target_arch == target_arch)
    return query


def latest_snapshot(
    storage: Storage, target_kind: str, target_arch: str | None
) -> tuple[SnapshotInfo, bytes] | None:
    """The newest snapshot for a target kind and architecture, with its model bytes."""
    query = _where(select(CostModelSnapshot), target_kind, target_arch).order_by(
        CostModelSnapshot.id.desc()
    )

    def load(session: Session) -> tuple[SnapshotInfo, bytes] | None:
        row = session.scalars(query.limit(1)).first()
        return (_info(row), bytes(row.model_blob or b"")) if row is not None else None

    return storage.run(load)


def list_snapshots(
    storage: Storage, target_kind: str | None = None, target_arch: str | None = None
) -> list[SnapshotInfo]:
    """All snapshots (of a target kind and architecture when given), newest first."""
    query = _where(select(CostModelSnapshot), target_kind, target_arch).order_by(
        CostModelSnapshot.id.desc()
    )
    return storage.run(lambda s: [_info(row) for row in s.scalars(query)])
