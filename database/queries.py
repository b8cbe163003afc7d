"""Read-only summaries of a schedule database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import distinct, func, select

from database.models import JobRow, RecordRow, WorkloadRow
from database.storage import Storage


def stats(storage: Storage) -> dict[str, Any]:
    """Counts of workloads, records (valid and failed), jobs and targets."""

    def count(session: Any) -> dict[str, Any]:
        records = session.scalar(select(func.count(RecordRow.id))) or 0
        valid = (
            session.scalar(select(func.count(RecordRow.id)).where(RecordRow.mean_sec.is_not(None)))
            or 0
        )
        kinds = session.execute(
            select(RecordRow.target_kind, func.count(RecordRow.id)).group_by(RecordRow.target_kind)
        ).all()
        return {
            "workloads": int(session.scalar(select(func.count(WorkloadRow.id))) or 0),
            "records": int(records),
            "valid_records": int(valid),
            "failed_records": int(records - valid),
            "jobs": int(session.scalar(select(func.count(JobRow.id))) or 0),
            "targets": int(session.scalar(select(func.count(distinct(RecordRow.target_key)))) or 0),
            "records_by_target_kind": {str(k): int(n) for k, n in kinds},
        }

    return storage.run(count)
