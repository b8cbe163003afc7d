"""Tune jobs in the schedule database: one row per job (name, status, budget, progress, who
submitted it, when it started and finished), written by the job as it runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from database.models import JobRow
from database.storage import Storage


def insert_job(session: Session, fields: dict[str, Any]) -> int:
    """Insert a job row inside ``session``'s transaction; returns its id."""
    row = JobRow(**fields)
    session.add(row)
    session.flush()
    return row.id


def start_job(storage: Storage, **fields: Any) -> int:
    """Insert a job row in a transaction of its own; returns its id."""
    return storage.run(lambda session: insert_job(session, fields))


def set_job_fields(session: Session, job_id: int, fields: dict[str, Any]) -> None:
    """Update fields of a job row inside ``session``'s transaction (nothing if it is gone)."""
    row = session.get(JobRow, job_id)
    if row is not None:
        for key, value in fields.items():
            setattr(row, key, value)


def update_job(storage: Storage, job_id: int, **fields: Any) -> None:
    """Update fields of a job row in a transaction of its own (nothing if it is gone)."""
    storage.run(lambda session: set_job_fields(session, job_id, fields))
