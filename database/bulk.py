"""Bulk import: many measurements with their workloads in one transaction (``db import``
and ``db merge``), so that either everything lands or nothing does."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text, update
from sqlalchemy.orm import Session
from tvm.s_tir.meta_schedule.database import Workload

from database import verdicts as verdict_rows
from database.jobs import insert_job
from database.models import RecordRow
from database.records import (
    Measurement,
    WorkloadIds,
    WorkloadLabels,
    insert_generic_run,
    insert_record,
    record_values,
    same_record,
    workload_row_id,
)
from database.storage import Storage

BULK_LOCK = 0x7475_6E65_6661_726D  # "tunefarm": PostgreSQL advisory lock of bulk copies


def add_many(
    storage: Storage,
    items: list[tuple[Measurement, WorkloadLabels]],
    *,
    job: dict[str, Any] | None = None,
    copy_jobs: list[dict[str, Any]] | None = None,
    generic_runs: list[dict[str, Any]] | None = None,
    verdicts: list[tuple[Workload, dict[str, Any]]] | None = None,
) -> int:
    """Store measurements with their workloads in ONE transaction; returns how many were new.

    Idempotent by record identity: a measurement identical to a stored record (same workload,
    target, candidate, trace, run times and arguments: :func:`same_record`), or to one earlier
    in ``items``, is the same record and is skipped; another measurement of a stored candidate
    is a record of its own.

    Used by import and merge: either everything lands or nothing does. ``job`` creates a
    job row that the records point to; ``copy_jobs`` copies other jobs (each with its
    ``old_id``), and records' ``job_id`` are mapped from the old ids to the copies;
    ``generic_runs`` (column values) are added where the same kernel, bucket, target and
    device has none; ``verdicts`` (the re-timing's, :func:`database.verdicts.rows` values of
    a workload) are added where the same verdict is not stored.
    """

    def write(session: Session) -> int:
        if storage.dialect == "postgresql":  # check-then-insert: one bulk copy at a time
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": BULK_LOCK})
        import_job: int | None = None
        if job is not None:
            import_job = insert_job(session, job)
        pending = {fields["old_id"]: fields for fields in copy_jobs or []}
        copied: dict[int, int] = {}

        def copy_of(old: int) -> int | None:
            # a teammate's job is copied once, and only when one of its records is new
            if old not in copied and old in pending:
                fields = {k: v for k, v in pending[old].items() if k != "old_id"}
                copied[old] = insert_job(session, fields)
            return copied.get(old)

        added = 0
        ids = WorkloadIds()
        for m, info in items:
            wid = ids.get(m.workload)
            if wid is None:
                mod = m.workload.mod
                wid = workload_row_id(
                    session,
                    mod,
                    shash=ids.shash(mod),
                    create=True,
                    task_name=info.task_name,
                    family=info.family,
                )
                assert wid is not None
                ids.put(m.workload, mod, wid)
            values = record_values(m, wid)
            values["job_id"] = import_job
            if session.execute(same_record(values)).first() is not None:
                continue
            rid = session.execute(insert_record(values)).scalar()
            added += 1
            if m.job_id is not None and copy_jobs is not None:
                session.execute(
                    update(RecordRow).where(RecordRow.id == rid).values(job_id=copy_of(m.job_id))
                )
        for values in generic_runs or []:
            insert_generic_run(session, dict(values))
        for workload, values in verdicts or []:
            wid = ids.get(workload)
            if wid is None:  # a workload none of whose records came along
                mod = workload.mod
                wid = workload_row_id(session, mod, shash=ids.shash(mod), create=False)
            if wid is not None:
                verdict_rows.insert_copy(session, {**values, "workload_id": wid})
        return added

    return storage.run(write)
