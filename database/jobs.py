"""Tune jobs in the schedule database: one row per job (name, status, budget, progress, who
submitted it, when it started and finished), written by the job as it runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import JobRow, JobTaskRow
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


def record_job_tasks(storage: Storage, job_id: int, tasks: list[dict[str, Any]]) -> None:
    """Store how each of job ``job_id``'s tasks ended (one ``job_tasks`` row per task, its
    fields as :class:`database.models.JobTaskRow`'s), replacing any stored before."""

    def write(session: Session) -> None:
        session.query(JobTaskRow).filter(JobTaskRow.job_id == job_id).delete()
        session.add_all(JobTaskRow(job_id=job_id, **task) for task in tasks)

    storage.run(write)


def stored_task_ends(storage: Storage, job_id: int) -> list[dict[str, Any]]:
    """How each of job ``job_id``'s tasks ended, in the order the job stored them."""

    def load(session: Session) -> list[dict[str, Any]]:
        rows = session.query(JobTaskRow).filter(JobTaskRow.job_id == job_id).order_by(JobTaskRow.id)
        return [
            {c.name: getattr(row, c.name) for c in JobTaskRow.__table__.columns} for row in rows
        ]

    return storage.run(load, write=False)


def latest_convergence(session: Session, workload_ids: list[int] | None = None) -> dict[int, Any]:
    """Per workload, how the latest job that stored it ended: ``{workload_id: (converged,
    expected_gain, job_id)}`` (a workload no job stored is absent). One indexed query."""
    latest = select(JobTaskRow.workload_id, func.max(JobTaskRow.job_id).label("job_id")).where(
        JobTaskRow.workload_id.is_not(None)
    )
    if workload_ids is not None:
        latest = latest.where(JobTaskRow.workload_id.in_(workload_ids))
    sub = latest.group_by(JobTaskRow.workload_id).subquery()
    rows = session.execute(
        select(
            JobTaskRow.workload_id,
            JobTaskRow.converged,
            JobTaskRow.expected_gain,
            JobTaskRow.job_id,
        ).join(
            sub,
            (JobTaskRow.workload_id == sub.c.workload_id) & (JobTaskRow.job_id == sub.c.job_id),
        )
    )
    return {wid: (bool(conv), gain, jid) for wid, conv, gain, jid in rows}
