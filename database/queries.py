"""Read-only summaries of a schedule database."""

from __future__ import annotations

import json
import statistics
from typing import Any, NamedTuple

from sqlalchemy import distinct, func, select

from database import evidence
from database.jobs import latest_convergence
from database.models import JobRow, RecordRow, WorkloadRow
from database.storage import Storage


def stats(storage: Storage) -> dict[str, Any]:
    """Counts of workloads, records (valid and failed), schedules (distinct candidates per
    workload and target: a schedule measured again has several records), jobs and targets."""

    def count(session: Any) -> dict[str, Any]:
        records = session.scalar(select(func.count(RecordRow.id))) or 0
        valid = (
            session.scalar(select(func.count(RecordRow.id)).where(RecordRow.mean_sec.is_not(None)))
            or 0
        )
        schedules = (
            select(RecordRow.workload_id, RecordRow.target_key, RecordRow.candidate_hash)
            .distinct()
            .subquery()
        )
        kinds = session.execute(
            select(RecordRow.target_kind, func.count(RecordRow.id)).group_by(RecordRow.target_kind)
        ).all()
        return {
            "workloads": int(session.scalar(select(func.count(WorkloadRow.id))) or 0),
            "records": int(records),
            "schedules": int(session.scalar(select(func.count()).select_from(schedules)) or 0),
            "valid_records": int(valid),
            "failed_records": int(records - valid),
            "jobs": int(session.scalar(select(func.count(JobRow.id))) or 0),
            "targets": int(session.scalar(select(func.count(distinct(RecordRow.target_key)))) or 0),
            "records_by_target_kind": {str(k): int(n) for k, n in kinds},
        }

    return storage.run(count, write=False)


def list_workloads(storage: Storage, *, task: str | None = None) -> list[dict[str, Any]]:
    """One row per workload: task, bucket, record counts, its best time (the pooled
    median of its best schedule, of the fastest target) and how the latest job that tuned it
    ended (``converged``, ``expected_gain``, ``converged_job_id``; None when no job stored it)."""

    def load(session: Any) -> list[dict[str, Any]]:
        valid = func.count(RecordRow.mean_sec)
        query = (
            select(
                WorkloadRow.id,
                WorkloadRow.task_name,
                WorkloadRow.bucket_json,
                WorkloadRow.flops,
                func.count(RecordRow.id),
                valid,
                func.min(RecordRow.mean_sec),
                func.count(distinct(RecordRow.target_key)),
            )
            .outerjoin(RecordRow)
            .group_by(WorkloadRow.id)
            .order_by(WorkloadRow.id)
        )
        if task:
            query = query.where(WorkloadRow.task_name.contains(task))
        rows = list(session.execute(query))
        where = [RecordRow.workload_id.in_([r[0] for r in rows])] if task else []
        best: dict[int, float] = {}
        for (wid, _tkey), (_cand, ev) in evidence.best_per_partition(
            session.connection(), where=where
        ).items():
            best[wid] = min(best.get(wid, ev.median), ev.median)
        conv = latest_convergence(session, [r[0] for r in rows] if task else None)
        return [
            {
                "id": wid,
                "task": name,
                "bucket": json.loads(bucket) if bucket else None,
                "flops": flops,
                "records": int(n),
                "valid": int(nv),
                "best_sec": best.get(wid),
                "targets": int(nt),
                "converged": conv[wid][0] if wid in conv else None,
                "expected_gain": conv[wid][1] if wid in conv else None,
                "converged_job_id": conv[wid][2] if wid in conv else None,
            }
            for wid, name, bucket, flops, n, nv, _lowest, nt in rows
        ]

    return storage.run(load, write=False)


def best_records(
    storage: Storage, *, target_kind: str | None = None, task: str | None = None
) -> list[dict[str, Any]]:
    """The best schedule per (workload, target) (:mod:`database.evidence`), with the
    provenance of its first record and its evidence: ``runs`` (timed runs pooled),
    ``samples``, ``median`` (seconds), ``spread`` (IQR / median) and ``confirmed``."""

    def load(session: Any) -> list[dict[str, Any]]:
        where = []
        if target_kind:
            where.append(RecordRow.target_kind == target_kind)
        if task:
            names = select(WorkloadRow.id).where(WorkloadRow.task_name.contains(task))
            where.append(RecordRow.workload_id.in_(names))
        best = evidence.best_per_partition(session.connection(), where=where)
        out = []
        for _part, (_cand, ev) in sorted(best.items()):
            row = session.get(RecordRow, ev.first_id)
            wl = session.get(WorkloadRow, row.workload_id)
            out.append(
                {
                    "workload_id": row.workload_id,
                    "task": wl.task_name,
                    "bucket": json.loads(wl.bucket_json) if wl.bucket_json else None,
                    "target_kind": row.target_kind,
                    "target_arch": row.target_arch,
                    "target": json.loads(row.target_json),
                    "device": row.device,
                    "worker": row.worker,
                    "job_id": row.job_id,
                    "mean_sec": ev.mean,
                    "std_sec": statistics.pstdev(ev.secs),
                    **ev.to_dict(),
                    "gflops": wl.flops / ev.median / 1e9 if wl.flops and ev.median else None,
                    "created_at": row.created_at.isoformat() if row.created_at else None,
                }
            )
        out.sort(key=lambda r: (r["workload_id"], r["target_kind"]))
        return out

    return storage.run(load, write=False)


def list_jobs(storage: Storage) -> list[dict[str, Any]]:
    """Every job, newest first."""

    def load(session: Any) -> list[dict[str, Any]]:
        rows = session.scalars(select(JobRow).order_by(JobRow.id.desc()))
        return [
            {
                "id": j.id,
                "name": j.name,
                "status": j.status,
                "budget": j.budget,
                "trials_done": j.trials_done,
                "submitted_by": j.submitted_by,
                "started_at": j.started_at.isoformat() if j.started_at else None,
                "finished_at": j.finished_at.isoformat() if j.finished_at else None,
            }
            for j in rows
        ]

    return storage.run(load, write=False)


class RecordEvent(NamedTuple):
    """One record in recording order: its workload's structural hash, when it was stored
    (as the database returns it: naive UTC on SQLite) and its mean seconds (None: failed)."""

    shash: str
    created_at: Any
    mean_sec: float | None


def record_timeline(
    storage: Storage,
    *,
    workload_id: int | None = None,
    job_id: int | None = None,
    valid_only: bool = False,
) -> list[RecordEvent]:
    """The records (of one workload, of one job, or all), in recording order."""
    query = (
        select(WorkloadRow.shash, RecordRow.created_at, RecordRow.mean_sec)
        .join(WorkloadRow, RecordRow.workload_id == WorkloadRow.id)
        .order_by(RecordRow.id)
    )
    if workload_id is not None:
        query = query.where(RecordRow.workload_id == workload_id)
    if job_id is not None:
        query = query.where(RecordRow.job_id == job_id)
    if valid_only:
        query = query.where(RecordRow.mean_sec.is_not(None))
    rows = storage.run(lambda s: list(s.execute(query)), write=False)
    return [RecordEvent(r[0], r[1], r[2]) for r in rows]


def job_times(storage: Storage) -> dict[int, tuple[Any, Any]]:
    """(started, finished or None) of every job, by id in creation order."""
    query = select(JobRow.id, JobRow.started_at, JobRow.finished_at).order_by(JobRow.id)
    rows = storage.run(lambda s: list(s.execute(query)), write=False)
    return {r[0]: (r[1], r[2]) for r in rows}
