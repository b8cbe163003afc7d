"""Tune jobs in the schedule database: one row per job (name, status, budget, progress, who
submitted it, when it started and finished), written by the job as it runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from database.models import JobRow
from database.storage import Storage


def start_job(storage: Storage, **fields: Any) -> int:
    """Insert a job row; returns its id."""

    def insert(session: Session) -> int:
        row = JobRow(**fields)
        session.add(row)
        session.flush()
        return row.id

    return storage.run(insert)


def update_job(storage: Storage, job_id: int, **fields: Any) -> None:
    """Update fields of a job row (nothing if it is gone)."""

    def update(session: Session) -> None:
        row = session.get(JobRow, job_id)
        if row is not None:
            for key, value in fields.items():
                setattr(row, key, value)

    storage.run(update)
