"""The dashboard's reads: one function per page, each a few indexed queries.

Every function takes a connection and returns plain JSON-ready data (the ``/api/...`` twins
serve it as is; the HTML pages render it). Nothing assumes one record per candidate: a job's
kernels, bests and counts are aggregates over its records. The queries stay fast on a database
of millions of records by reading through indexes only what a page shows:

- a job's kernels are found by a skip scan of ``ix_record_job`` (job, workload, time): one
  index seek per kernel, with each kernel's best as one more seek;
- an untuned default's time is found through ``ix_record_candidate``: the default schedule's
  candidate hash is its workload's structural hash;
- a job's curves are running minima computed by the database (window functions), so only
  the records that improved a best reach Python.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, text

from database.evidence import best_of
from database.models import EMPTY_TRACE, JobRow, JobTaskRow, RecordRow, WorkloadRow

JOB_STATUSES = ("running", "done", "interrupted", "failed")

# (job, kernel, its best time in the job, the job's target) for the given jobs, by a skip scan
_JOB_KERNELS = text(
    """
WITH RECURSIVE k(job_id, wid, target_key) AS (
    SELECT j.id,
        (SELECT MIN(r.workload_id) FROM tuning_records r WHERE r.job_id = j.id),
        (SELECT r.target_key FROM tuning_records r WHERE r.job_id = j.id LIMIT 1)
    FROM jobs j WHERE j.id IN :ids
    UNION ALL
    SELECT k.job_id, (SELECT MIN(r.workload_id) FROM tuning_records r
                      WHERE r.job_id = k.job_id AND r.workload_id > k.wid), k.target_key
    FROM k WHERE k.wid IS NOT NULL
)
SELECT k.job_id, k.wid,
    (SELECT MIN(r.mean_sec) FROM tuning_records r
     WHERE r.job_id = k.job_id AND r.workload_id = k.wid) AS best,
    k.target_key
FROM k WHERE k.wid IS NOT NULL
"""
).bindparams(bindparam("ids", expanding=True))


# ------------------------------------------------------------------------------- helpers
def epoch(value: Any) -> float | None:
    """Seconds since the epoch of a stored time (naive times are UTC, as TuneFarm stores)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def iso(value: Any) -> str | None:
    """A stored time as ISO 8601 UTC, to the second."""
    sec = epoch(value)
    if sec is None:
        return None
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _now() -> float:
    return dt.datetime.now(dt.timezone.utc).timestamp()


def bucket_label(bucket_json: str | None) -> str:
    """``n=16, s=4`` for a bucket's values; ``static`` for a kernel without one."""
    if not bucket_json:
        return "static"
    values = json.loads(bucket_json)
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "static"


def kernel_name(task_name: str | None, shash: str, family: str | None = None) -> str:
    """A workload's kernel: its task name, else its structural hash (or its family's)."""
    return task_name or f"kernel {(family or shash)[:8]}"


def trace_text(trace_json: str) -> str:
    """A trace as text: one instruction a line, then the sampling decisions."""
    trace = json.loads(trace_json)
    insts, decisions = [*trace, [], []][:2] if isinstance(trace, list) else ([trace], [])
    lines = [json.dumps(inst) for inst in insts] or ["(no instruction: the untuned default)"]
    if decisions:
        lines += ["", "decisions:", *(json.dumps(d) for d in decisions)]
    return "\n".join(lines)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def _chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def job_kernels(
    conn: Connection, job_ids: Sequence[int]
) -> dict[int, list[tuple[int, float | None, str]]]:
    """For each job, its kernels: (workload id, the job's best time or None, target key)."""
    out: dict[int, list[tuple[int, float | None, str]]] = defaultdict(list)
    for chunk in _chunks(list(job_ids)):
        for job_id, wid, best, tkey in conn.execute(_JOB_KERNELS, {"ids": list(chunk)}):
            out[job_id].append((wid, best, tkey))
    return out


Kernels = list[tuple[int, float | None, str]]


class FinishedJobs:
    """Kernels of finished jobs, kept by a long-running server: a job that is no longer
    running gets no new record, so its kernels and bests are read once. An entry is stamped
    with the job's status, trials and end, and read again if any of them changes."""

    def __init__(self) -> None:
        self._kernels: dict[int, tuple[tuple[Any, ...], Kernels]] = {}

    def kernels(self, conn: Connection, rows: Sequence[Any]) -> dict[int, Kernels]:
        """The kernels of the jobs of ``rows`` (job rows), from the cache where it holds."""
        stamps = {r.id: (r.status, r.trials_done, r.finished_at) for r in rows}
        out = {
            jid: self._kernels[jid][1]
            for jid, stamp in stamps.items()
            if jid in self._kernels and self._kernels[jid][0] == stamp
        }
        fresh = job_kernels(conn, [jid for jid in stamps if jid not in out])
        for jid in stamps:
            if jid not in out:
                out[jid] = fresh.get(jid, [])
                if stamps[jid][0] != "running":
                    self._kernels[jid] = (stamps[jid], out[jid])
        return out


def default_secs(conn: Connection, wids: Iterable[int]) -> dict[tuple[int, str], float]:
    """The untuned default schedule's time of each workload, by (workload id, target key).

    The default's candidate hash is its workload's structural hash, so the records are found
    by seeks of ``ix_record_candidate``."""
    shash = {w.id: w.shash for w in _workloads(conn, wids).values()}
    out: dict[tuple[int, str], float] = {}
    for chunk in _chunks(sorted(set(shash.values()))):
        query = (
            select(
                RecordRow.workload_id,
                RecordRow.candidate_hash,
                RecordRow.target_key,
                func.min(RecordRow.mean_sec),
            )
            .where(RecordRow.candidate_hash.in_(chunk), RecordRow.trace_json == EMPTY_TRACE)
            .group_by(RecordRow.workload_id, RecordRow.candidate_hash, RecordRow.target_key)
        )
        for wid, candidate, tkey, sec in conn.execute(query):
            if sec is not None and shash.get(wid) == candidate:
                out[(wid, tkey)] = sec
    return out


def _workloads(conn: Connection, wids: Iterable[int]) -> dict[int, Any]:
    rows: dict[int, Any] = {}
    for chunk in _chunks(sorted(set(wids))):
        query = select(
            WorkloadRow.id,
            WorkloadRow.shash,
            WorkloadRow.task_name,
            WorkloadRow.family_shash,
            WorkloadRow.bucket_json,
            WorkloadRow.flops,
        ).where(WorkloadRow.id.in_(chunk))
        rows.update({r.id: r for r in conn.execute(query)})
    return rows


def _model_speedup(kernels: list[tuple[int, float | None, str]], defaults: dict) -> float | None:
    """Sum of the kernels' untuned times over the sum of their best times (kernels with both)."""
    pairs = [(defaults.get((w, t)), b) for w, b, t in kernels]
    pairs = [(d, b) for d, b in pairs if d and b]
    return _ratio(sum(d for d, _ in pairs), sum(b for _, b in pairs)) if pairs else None


def _where_ran(conn: Connection, job_ids: Sequence[int]) -> dict[int, Any]:
    """Where each job ran: the device and worker of its first kernel's best record (one
    index seek a job; the job's page lists every device and worker)."""
    first = (
        select(RecordRow.id)
        .where(RecordRow.job_id == JobRow.id)
        .order_by(RecordRow.job_id, RecordRow.workload_id, RecordRow.mean_sec)
        .limit(1)
        .scalar_subquery()
    )
    ids = dict(conn.execute(select(JobRow.id, first).where(JobRow.id.in_(job_ids))).all())
    rows = conn.execute(
        select(RecordRow.id, RecordRow.device, RecordRow.worker, RecordRow.target_kind).where(
            RecordRow.id.in_([i for i in ids.values() if i is not None])
        )
    )
    by_id = {row.id: row for row in rows}
    return {job: by_id[rid] for job, rid in ids.items() if rid in by_id}


def _job_dict(job: Any, now: float) -> dict[str, Any]:
    started, finished = epoch(job.started_at), epoch(job.finished_at)
    end = finished if finished is not None else (now if job.status == "running" else None)
    return {
        "id": job.id,
        "name": job.name,
        "model": job.model,
        "status": job.status,
        "budget": job.budget,
        "trials": job.trials_done,
        "submitted_by": job.submitted_by,
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "wall_sec": end - started if end is not None and started is not None else None,
        "error": job.error,
    }


# ------------------------------------------------------------------------------- pages
def jobs(
    conn: Connection,
    *,
    limit: int = 100,
    ids: Sequence[int] | None = None,
    bests: bool = False,
    cache: FinishedJobs | None = None,
) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs (or those of ``ids``) with their trials, wall time, speedup
    and where they ran; with ``bests``, each kernel's best (``kernel_bests``, by workload).
    ``cache`` keeps finished jobs' kernels between calls."""
    query = select(JobRow).order_by(JobRow.id.desc()).limit(limit)
    if ids is not None:
        query = query.where(JobRow.id.in_(ids))
    rows = list(conn.execute(query))
    ids = [r.id for r in rows]
    kernels = (cache or FinishedJobs()).kernels(conn, rows)
    defaults = default_secs(conn, (w for ks in kernels.values() for w, _, _ in ks))
    last = _where_ran(conn, ids)
    now = _now()
    out = []
    for job in rows:
        item = _job_dict(job, now)
        where = last.get(job.id)
        item["kernels"] = len(kernels.get(job.id, []))
        if bests:
            item["kernel_bests"] = {w: b for w, b, _ in kernels.get(job.id, [])}
        item["speedup"] = _model_speedup(kernels.get(job.id, []), defaults)
        item["device"] = where.device if where else None
        item["worker"] = where.worker if where else None
        item["target_kind"] = where.target_kind if where else None
        out.append(item)
    return out


def job(conn: Connection, job_id: int) -> dict[str, Any] | None:
    """One job: its fields, kernels (trials, bests, GFLOPS, speedup) and wall-time phases."""
    row = conn.execute(select(JobRow).where(JobRow.id == job_id)).first()
    if row is None:
        return None
    out = _job_dict(row, _now())
    out["config"] = json.loads(row.config_json) if row.config_json else None
    kernels = job_kernels(conn, [job_id]).get(job_id, [])
    wids = [w for w, _, _ in kernels]
    defaults = default_secs(conn, wids)
    info = _workloads(conn, wids)
    counts = {
        wid: (n, nv)
        for wid, n, nv in conn.execute(
            select(RecordRow.workload_id, func.count(), func.count(RecordRow.mean_sec))
            .where(RecordRow.job_id == job_id)
            .group_by(RecordRow.workload_id)
        )
    }
    tkey = kernels[0][2] if kernels else None
    # the database's best of each kernel as the build picks it: the lowest pooled median
    db_bests = {
        wid: found[1].median
        for wid in wids
        if (found := best_of(conn, wid, [RecordRow.target_key == tkey])) is not None
    }
    ended = _task_ends(conn, job_id)
    rows = []
    for wid, best, tkey in kernels:
        w = info[wid]
        end = ended.get(wid)
        db_best = db_bests.get(wid)
        default = defaults.get((wid, tkey))
        n, nv = counts.get(wid, (0, 0))
        rows.append(
            {
                "workload_id": wid,
                "kernel": kernel_name(w.task_name, w.shash, w.family_shash),
                "bucket": bucket_label(w.bucket_json),
                "trials": n,
                "failed": n - nv,
                "best_sec": best,
                "database_best_sec": db_best,
                "default_sec": default,
                "gflops": w.flops / best / 1e9 if w.flops and best else None,
                "speedup": _ratio(default, best),
                # how the task ended (None: the job stored no job_tasks row for it)
                "weight": end.weight if end else None,
                "converged": end.converged if end else None,
                "converged_at": end.converged_at if end else None,
                "expected_gain": end.expected_gain if end else None,
            }
        )
    out["kernels"] = rows
    out["task_ends"] = bool(ended)
    out["target_key"] = kernels[0][2] if kernels else None
    target = conn.execute(
        select(RecordRow.target_json, RecordRow.target_kind)
        .where(RecordRow.job_id == job_id)
        .order_by(RecordRow.job_id, RecordRow.workload_id)
        .limit(1)
    ).first()
    out["target"] = json.loads(target.target_json) if target else None
    out["target_kind"] = target.target_kind if target else None
    out["speedup"] = _model_speedup(kernels, defaults)
    out["where"] = [
        {"device": d, "worker": wk, "records": int(n)}
        for d, wk, n in conn.execute(
            select(RecordRow.device, RecordRow.worker, func.count())
            .where(RecordRow.job_id == job_id)
            .group_by(RecordRow.device, RecordRow.worker)
        )
    ]
    out["phases"] = _phases(conn, row, wids)
    return out


def _task_ends(conn: Connection, job_id: int) -> dict[int, Any]:
    """How each of a finished job's tasks ended, by workload (``job_tasks``, one seek of its
    job index); empty for a running job and for jobs that ended before revision 0008."""
    t = JobTaskRow
    query = select(t.workload_id, t.weight, t.converged, t.converged_at, t.expected_gain).where(
        t.job_id == job_id, t.workload_id.is_not(None)
    )
    return {row.workload_id: row for row in conn.execute(query)}


def _phases(conn: Connection, job: Any, wids: Sequence[int]) -> list[dict[str, Any]]:
    """The job's wall time as its records date it: startup, untuned defaults, search, after."""
    # by the times, not min/max(id): PostgreSQL would walk the primary key from one end
    first, last = conn.execute(
        select(func.min(RecordRow.created_at), func.max(RecordRow.created_at)).where(
            RecordRow.job_id == job.id
        )
    ).one()
    last_default = None
    if wids:
        last_default = conn.scalar(
            select(func.max(RecordRow.created_at))
            .join(
                WorkloadRow,
                (WorkloadRow.shash == RecordRow.candidate_hash)
                & (WorkloadRow.id == RecordRow.workload_id),
            )
            .where(RecordRow.job_id == job.id, RecordRow.trace_json == EMPTY_TRACE)
        )
    start = epoch(job.started_at)
    end = epoch(job.finished_at) if job.finished_at is not None else _now()
    marks = [("startup", epoch(first)), ("untuned defaults", epoch(last_default))]
    marks += [("search", epoch(last)), ("after the search" if job.finished_at else "running", end)]
    out, at = [], start
    for name, mark in marks:
        if mark is None or at is None:
            continue
        out.append({"phase": name, "sec": max(0.0, mark - at)})
        at = max(at, mark)
    return out


def curves(conn: Connection, job_id: int) -> dict[str, Any] | None:
    """Best-so-far time against wall time and trials, per kernel and for the whole model.

    Points are the improvements only (a step curve); ``end`` gives where each axis ends.
    The whole model's time is the sum of its kernels' bests, from when every kernel has one.
    """
    head = conn.execute(
        select(JobRow.started_at, JobRow.finished_at, JobRow.status).where(JobRow.id == job_id)
    ).first()
    if head is None:
        return None
    start = epoch(head.started_at) or 0.0
    base = select(
        RecordRow.id,
        RecordRow.workload_id,
        RecordRow.mean_sec,
        func.row_number().over(order_by=RecordRow.id).label("trial"),
        func.row_number()
        .over(partition_by=RecordRow.workload_id, order_by=RecordRow.id)
        .label("task_trial"),
        func.min(RecordRow.mean_sec)
        .over(partition_by=RecordRow.workload_id, order_by=RecordRow.id, rows=(None, -1))
        .label("prev"),
    ).where(RecordRow.job_id == job_id)
    sub = base.subquery()
    better = (
        select(sub.c.id, sub.c.workload_id, sub.c.mean_sec, sub.c.trial, sub.c.task_trial)
        .where(sub.c.mean_sec.is_not(None), (sub.c.prev.is_(None)) | (sub.c.mean_sec < sub.c.prev))
        .subquery()
    )
    # the improvements' times: read from the table for those few records only
    query = (
        select(
            better.c.workload_id,
            RecordRow.created_at,
            better.c.mean_sec,
            better.c.trial,
            better.c.task_trial,
        )
        .join(RecordRow, RecordRow.id == better.c.id)
        .order_by(better.c.id)
    )
    count, last_at = conn.execute(
        select(func.count(), func.max(RecordRow.created_at)).where(RecordRow.job_id == job_id)
    ).one()
    per_task = dict(
        conn.execute(
            select(RecordRow.workload_id, func.count())
            .where(RecordRow.job_id == job_id)
            .group_by(RecordRow.workload_id)
        ).all()
    )
    info = _workloads(conn, per_task)
    tasks: dict[int, dict[str, Any]] = {}
    for wid, n in per_task.items():
        w = info[wid]
        name = kernel_name(w.task_name, w.shash, w.family_shash)
        if w.bucket_json:
            name += f" [{bucket_label(w.bucket_json)}]"
        tasks[wid] = {"name": name, "time": [], "trials": [], "trials_end": int(n)}
    bests: dict[int, float] = {}
    model_time: list[list[float]] = []
    model_trials: list[list[float]] = []
    for wid, created, sec, trial, task_trial in conn.execute(query):
        at = (epoch(created) or start) - start
        tasks[wid]["time"].append([at, sec])
        tasks[wid]["trials"].append([int(task_trial), sec])
        bests[wid] = sec
        if len(bests) == len(tasks):
            total = sum(bests.values())
            model_time.append([at, total])
            model_trials.append([int(trial), total])
    running = head.status == "running"
    end_at = epoch(last_at)
    if running:
        end_at = _now()
    return {
        "job_id": job_id,
        "tasks": [{"workload_id": w, **t} for w, t in tasks.items()],
        "model": {"time": model_time, "trials": model_trials},
        "end": {"sec": (end_at - start) if end_at else 0.0, "trials": int(count)},
    }


def models(conn: Connection) -> list[dict[str, Any]]:
    """The models jobs were run for: how many jobs, the newest one."""
    query = (
        select(JobRow.model, func.count(), func.max(JobRow.id), func.max(JobRow.started_at))
        .group_by(JobRow.model)
        .order_by(func.max(JobRow.id).desc())
    )
    return [
        {"model": m, "jobs": int(n), "last_job": last, "last_started": iso(at)}
        for m, n, last, at in conn.execute(query)
        if m is not None
    ]


def coverage(conn: Connection, model: str, target_key: str | None = None) -> dict[str, Any] | None:
    """A model's kernel x bucket grid on one target: records, best, default, tuned or not."""
    job_ids = list(
        conn.scalars(select(JobRow.id).where(JobRow.model == model).order_by(JobRow.id.desc()))
    )
    if not job_ids:
        return None
    kernels = job_kernels(conn, job_ids)
    targets: list[str] = []
    for jid in job_ids:  # newest job's target first
        for _, _, tkey in kernels.get(jid, []):
            if tkey not in targets:
                targets.append(tkey)
    tkey = target_key if target_key in targets else (targets[0] if targets else None)
    wids = sorted({w for ks in kernels.values() for w, _, t in ks if t == tkey})
    info = _workloads(conn, wids)
    defaults = default_secs(conn, wids)
    stats: dict[int, tuple[int, int, float | None]] = {}
    for chunk in _chunks(wids):
        query = (
            select(
                RecordRow.workload_id,
                func.count(),
                func.count(RecordRow.mean_sec),
                func.min(RecordRow.mean_sec),
            )
            .where(RecordRow.workload_id.in_(chunk), RecordRow.target_key == tkey)
            .group_by(RecordRow.workload_id)
        )
        stats.update({w: (int(n), int(nv), best) for w, n, nv, best in conn.execute(query)})
    buckets: list[str] = []
    grid: dict[str, dict[str, dict[str, Any]]] = {}
    for wid in wids:
        w = info[wid]
        name, bucket = (
            kernel_name(w.task_name, w.shash, w.family_shash),
            bucket_label(w.bucket_json),
        )
        if bucket not in buckets:
            buckets.append(bucket)
        n, nv, best = stats.get(wid, (0, 0, None))
        default = defaults.get((wid, tkey))
        grid.setdefault(name, {})[bucket] = {
            "workload_id": wid,
            "records": n,
            "valid": nv,
            "best_sec": best,
            "default_sec": default,
            "speedup": _ratio(default, best),
            "tuned": best is not None and (default is None or best < default),
        }
    weights = _task_weights(conn, job_ids)
    for row in grid.values():
        for cell in row.values():
            cell["weight"] = weights.get(cell["workload_id"])
    cells = [c for row in grid.values() for c in row.values()]
    weighted = bool(cells) and all(c["weight"] is not None for c in cells)
    if weighted:  # the share of kernel calls (one model run at each bucket) served tuned
        calls = sum(c["weight"] for c in cells)
        share = sum(c["weight"] for c in cells if c["tuned"]) / calls if calls else None
    else:  # no weight for some cell (jobs before revision 0008): the share of cells
        share = sum(c["tuned"] for c in cells) / len(cells) if cells else None
    kinds = (
        dict(
            conn.execute(
                select(RecordRow.target_key, RecordRow.target_kind)
                .where(RecordRow.target_key.in_(targets))
                .group_by(RecordRow.target_key, RecordRow.target_kind)
            ).all()
        )
        if len(targets) > 1
        else {}
    )
    return {
        "model": model,
        "jobs": job_ids,
        "target_key": tkey,
        "targets": [{"key": t, "kind": kinds.get(t)} for t in targets],
        "buckets": sorted(buckets, key=_bucket_order),
        "kernels": [{"kernel": k, "cells": grid[k]} for k in sorted(grid)],
        "tuned_share": share,
        "share_of": "calls" if weighted else "cells",
        "cells": len(cells),
        "cells_weighted": sum(c["weight"] is not None for c in cells),
    }


def _task_weights(conn: Connection, job_ids: Sequence[int]) -> dict[int, int]:
    """Each workload's weight (calls per model run) as the newest of ``job_ids`` that
    stored one gives it (``job_tasks``, through its job index)."""
    t = JobTaskRow
    out: dict[int, int] = {}
    for chunk in _chunks(sorted(job_ids, reverse=True)):
        query = (
            select(t.workload_id, t.weight)
            .where(t.job_id.in_(chunk), t.workload_id.is_not(None))
            .order_by(t.job_id.desc())
        )
        for wid, weight in conn.execute(query):
            out.setdefault(wid, weight)
    return out


def _bucket_order(label: str) -> tuple[Any, ...]:
    parts = []
    for part in label.split(", "):
        _, _, value = part.partition("=")
        parts.append((0, int(value), "") if value.isdigit() else (1, 0, part))
    return tuple(parts)


def workload(
    conn: Connection, wid: int, target_key: str | None = None, *, limit: int = 200
) -> dict[str, Any] | None:
    """A workload: its targets, its fastest records with their spread, the best trace."""
    w = _workloads(conn, [wid]).get(wid)
    if w is None:
        return None
    targets = [
        {
            "key": t,
            "kind": kind,
            "arch": arch,
            "records": int(n),
            "valid": int(nv),
            "best_sec": best,
        }
        for t, kind, arch, n, nv, best in conn.execute(
            select(
                RecordRow.target_key,
                RecordRow.target_kind,
                RecordRow.target_arch,
                func.count(),
                func.count(RecordRow.mean_sec),
                func.min(RecordRow.mean_sec),
            )
            .where(RecordRow.workload_id == wid)
            .group_by(RecordRow.target_key, RecordRow.target_kind, RecordRow.target_arch)
            .order_by(func.count().desc())
        )
    ]
    keys = [t["key"] for t in targets]
    tkey = target_key if target_key in keys else (keys[0] if keys else None)
    default = default_secs(conn, [wid]).get((wid, tkey))
    order = RecordRow.mean_sec.is_(None), RecordRow.mean_sec, RecordRow.id
    rows = conn.execute(
        select(
            RecordRow.id,
            RecordRow.job_id,
            RecordRow.mean_sec,
            RecordRow.std_sec,
            RecordRow.run_secs_json,
            RecordRow.worker,
            RecordRow.device,
            RecordRow.error_kind,
            RecordRow.error_msg,
            RecordRow.created_at,
        )
        .where(RecordRow.workload_id == wid, RecordRow.target_key == tkey)
        .order_by(*order)
        .limit(limit)
    ).all()
    records = []
    for r in rows:
        runs = json.loads(r.run_secs_json) if r.run_secs_json else []
        records.append(
            {
                "id": r.id,
                "job_id": r.job_id,
                "mean_sec": r.mean_sec,
                "std_sec": r.std_sec,
                "runs": len(runs),
                "min_sec": min(runs) if runs else None,
                "max_sec": max(runs) if runs else None,
                "spread": (max(runs) - min(runs)) / r.mean_sec if runs and r.mean_sec else None,
                "worker": r.worker,
                "device": r.device,
                "error": f"{r.error_kind}: {r.error_msg}" if r.error_kind else None,
                "created_at": iso(r.created_at),
            }
        )
    # the best schedule as the build picks it (lowest pooled median), with its evidence
    best_trace, best_evidence = None, None
    found = best_of(conn, wid, [RecordRow.target_key == tkey]) if tkey is not None else None
    if found is not None:
        evidence = found[1]
        trace = conn.scalar(select(RecordRow.trace_json).where(RecordRow.id == evidence.first_id))
        best_trace = trace_text(trace) if trace else None
        best_evidence = evidence.to_dict()
    timeline = [
        [i, sec]
        for i, sec in enumerate(
            conn.scalars(
                select(RecordRow.mean_sec)
                .where(RecordRow.workload_id == wid, RecordRow.target_key == tkey)
                .order_by(RecordRow.id)
                .limit(5000)
            ),
            start=1,
        )
        if sec is not None
    ]
    return {
        "id": wid,
        "kernel": kernel_name(w.task_name, w.shash, w.family_shash),
        "shash": w.shash,
        "family": w.family_shash,
        "bucket": bucket_label(w.bucket_json),
        "flops": w.flops,
        "targets": targets,
        "target_key": tkey,
        "default_sec": default,
        "records": records,
        "best_trace": best_trace,
        "best_evidence": best_evidence,
        "timeline": timeline,
    }


def _device_pairs(conn: Connection) -> list[tuple[str, str | None]]:
    """The distinct (target key, device key) pairs of the records, by a skip scan of
    ``ix_record_target_device``: a few index seeks per pair, whatever the record count."""
    r = RecordRow
    pairs: list[tuple[str, str | None]] = []
    tkey = conn.scalar(select(func.min(r.target_key)))
    while tkey is not None:
        no_device = select(r.id).where(r.target_key == tkey, r.device_key.is_(None)).limit(1)
        if conn.scalar(no_device) is not None:
            pairs.append((tkey, None))
        dkey = conn.scalar(select(func.min(r.device_key)).where(r.target_key == tkey))
        while dkey is not None:
            pairs.append((tkey, dkey))
            dkey = conn.scalar(
                select(func.min(r.device_key)).where(r.target_key == tkey, r.device_key > dkey)
            )
        tkey = conn.scalar(select(func.min(r.target_key)).where(r.target_key > tkey))
    return pairs


def _kernels_on(conn: Connection, tkey: str, dkey: str | None) -> int:
    """How many workloads have records on a (target, device) pair: a skip scan of
    ``ix_record_target_device``, one seek per workload."""
    same = "r.target_key = :t AND " + (
        "r.device_key IS NULL" if dkey is None else "r.device_key = :d"
    )
    query = text(
        f"""
WITH RECURSIVE k(wid) AS (
    SELECT (SELECT MIN(r.workload_id) FROM tuning_records r WHERE {same})
    UNION ALL
    SELECT (SELECT MIN(r.workload_id) FROM tuning_records r WHERE {same} AND r.workload_id > k.wid)
    FROM k WHERE k.wid IS NOT NULL
)
SELECT COUNT(wid) FROM k
"""
    )
    return int(conn.scalar(query, {"t": tkey, "d": dkey}) or 0)


def devices(conn: Connection) -> list[dict[str, Any]]:
    """The targets and devices the database has records for: how many kernels have records
    there, and one record's target, device text and worker (reads a few index entries per
    kernel, not every record)."""
    r = RecordRow
    out = []
    for tkey, dkey in _device_pairs(conn):
        same = (r.target_key == tkey) & (
            r.device_key.is_(None) if dkey is None else r.device_key == dkey
        )
        row = conn.execute(
            select(r.target_kind, r.target_arch, r.target_json, r.device, r.worker, r.created_at)
            .where(same)
            .order_by(r.target_key, r.device_key, r.workload_id.desc())
            .limit(1)
        ).one()
        out.append(
            {
                "target_key": tkey,
                "target_kind": row.target_kind,
                "target_arch": row.target_arch,
                "target": json.loads(row.target_json),
                "device_key": dkey,
                "device": row.device,
                "worker": row.worker,
                "kernels": _kernels_on(conn, tkey, dkey),
            }
        )
    out.sort(key=lambda d: -d["kernels"])
    return out


def compare_side(conn: Connection, job_id: int) -> dict[str, Any] | None:
    """One side of a comparison: the job, its kernels' bests by (structural hash, bucket),
    its whole-model curves."""
    found = jobs(conn, ids=[job_id], bests=True)
    if not found:
        return None
    j = found[0]
    info = _workloads(conn, j["kernel_bests"])
    kernels = {
        (info[wid].shash, info[wid].bucket_json or ""): {
            "workload_id": wid,
            "kernel": kernel_name(info[wid].task_name, info[wid].shash, info[wid].family_shash),
            "bucket": bucket_label(info[wid].bucket_json),
            "sec": sec,
        }
        for wid, sec in j["kernel_bests"].items()
    }
    c = curves(conn, job_id)
    keys = ("id", "name", "model", "status", "trials", "speedup", "target_kind", "device")
    return {
        "job": {key: j[key] for key in keys},
        "kernels": kernels,
        "curve": {**c["model"], "end": c["end"]} if c else None,
    }


def compare_sides(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two sides (:func:`compare_side`, of one database or two) side by side: their curves,
    and the ratio of their bests on each kernel both tuned, matched by structural hash and
    bucket (workload ids differ between databases)."""
    kernels = []
    for key, ka in a["kernels"].items():
        kb = b["kernels"].get(key)
        if kb is None:
            continue
        kernels.append(
            {
                "workload_id": ka["workload_id"],
                "b_workload_id": kb["workload_id"],
                "kernel": ka["kernel"],
                "bucket": ka["bucket"],
                "shash": key[0],
                "a_sec": ka["sec"],
                "b_sec": kb["sec"],
                "ratio": _ratio(kb["sec"], ka["sec"]),
            }
        )
    return {
        "a": a["job"],
        "b": b["job"],
        "kernels": kernels,
        "curves": {"a": a["curve"], "b": b["curve"]},
    }


def compare(conn: Connection, a: int, b: int) -> dict[str, Any] | None:
    """Two jobs of one database side by side: whole-model curves, per-kernel ratios."""
    side_a, side_b = compare_side(conn, a), compare_side(conn, b)
    if side_a is None or side_b is None:
        return None
    return compare_sides(side_a, side_b)
