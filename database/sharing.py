"""Moving schedules between databases: stock MetaSchedule files, teammates' databases, packs.

Everything read is data: workloads and traces are parsed from TVM's JSON forms (never
unpickled or evaluated), and every write happens in one transaction, so a bad input line
or a failing merge leaves the database exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from database import evidence, verdicts
from database.bulk import add_many
from database.errors import DatabaseError, error_summary
from database.models import (
    GenericRun,
    JobRow,
    MetaRow,
    RecordRow,
    WorkloadRow,
    naive_utc,
    utcnow,
)
from database.records import Measurement, WorkloadLabels, generic_run_values, shash_of
from database.storage import Storage, redact
from database.targets import TargetKey

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
# TuneFarm's own facts about each exported workload (task name, symbolic kernel and bucket),
# one JSON line per line of WORKLOAD_FILE, in its order (``index``; files written before had
# only the structural hash, which two kernels of one structure share); stock ignores it.
INFO_FILE = "tunefarm_workloads.json"
# The times of symbolic kernels' generic code at each bucket (GenericRun), one JSON line each,
# so that an import builds the dispatch its source builds; stock MetaSchedule ignores it.
GENERIC_FILE = "tunefarm_generic_runs.json"
# The end-of-job re-timing's verdicts (VerdictRow), one JSON line each naming its workload's line
# of WORKLOAD_FILE, so that an import picks the schedules its source picks.
VERDICT_FILE = "tunefarm_verdicts.json"
FAILED_RUN_SEC = 1e9  # stock MetaSchedule stores a failed run as 1e10 seconds


@dataclass(frozen=True)
class CopySummary:
    """What an import, export or merge moved."""

    workloads: int
    records: int  # records read
    added: int  # records that were new at the destination

    def to_dict(self) -> dict[str, int]:
        return {"workloads": self.workloads, "records": self.records, "added": self.added}


def best_record_ids(session: Session) -> list[int]:
    """Ids of the valid records of the best schedule (:mod:`database.evidence`) per
    (workload, target): all its records, so a copy keeps its evidence."""
    conn = session.connection()
    ids: list[int] = []
    for (wid, tkey), (cand, _ev) in evidence.best_per_partition(conn).items():
        runs = evidence.samples(conn, wid, [(tkey, cand)])
        ids += [rid for rid, _ in runs.get((tkey, cand), [])]
    return sorted(ids)


def _stream(
    session: Session, ids: list[int] | None
) -> Iterator[tuple[RecordRow, str, WorkloadRow]]:
    query = select(RecordRow, WorkloadRow).join(WorkloadRow).order_by(RecordRow.id)
    if ids is not None:
        query = query.where(RecordRow.id.in_(ids))
    for row, wl in session.execute(query).tuples():
        yield row, wl.mod_json, wl


# ------------------------------------------------------------------ stock MetaSchedule files
def export_metaschedule(
    storage: Storage, out_dir: Path, *, best_only: bool = False, force: bool = False
) -> CopySummary:
    """Write valid records as stock ``JSONDatabase`` files (workloads + tuning records);
    ``force`` replaces those two files in a folder that has them (nothing else is touched)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise DatabaseError(
            f"{out_dir} is a file: --format metaschedule needs a folder (it writes "
            f"{WORKLOAD_FILE} and {RECORD_FILE} there)"
        )
    if not out_dir.parent.is_dir():
        raise DatabaseError(f"folder does not exist: {out_dir.parent}")
    names = (WORKLOAD_FILE, RECORD_FILE, INFO_FILE, GENERIC_FILE, VERDICT_FILE)
    paths = [out_dir / f for f in names]
    if not force and any(p.exists() and p.stat().st_size for p in paths):
        raise DatabaseError(
            f"{out_dir} already holds a MetaSchedule database; choose an empty folder "
            "or use --force to replace it"
        )

    def load(session: Session) -> tuple[list[tuple[RecordRow, str, WorkloadRow]], ...]:
        ids = best_record_ids(session) if best_only else None
        rows = [r for r in _stream(session, ids) if r[0].mean_sec is not None]
        return rows, _generic_runs(session), verdicts.rows(session)

    rows, generics, verdict_rows = storage.run(load, write=False)
    out_dir.mkdir(exist_ok=True)
    # The lines are written here, not through a stock JSONDatabase: its commit_workload folds
    # structurally equal modules into one, so a kernel with another kernel's structure and
    # other block names (BERT's T_add beside GPT-2's add) would get the first one's line, and
    # its records a workload their traces cannot replay on. Stock loads every line as its own
    # workload and attaches each record to the line its index names.
    index: dict[int, int] = {}  # workload row id -> line of WORKLOAD_FILE
    lines: tuple[list[str], ...] = ([], [], [], [_generic_line(g) for g in generics], [])
    for row, mod_json, wl in rows:
        if row.workload_id not in index:
            index[row.workload_id] = len(index)
            lines[0].append(json.dumps(Workload(tvm.ir.load_json(mod_json)).as_json()))
            lines[2].append(json.dumps(_info_of(wl, index[row.workload_id]), sort_keys=True))
        body = [
            json.loads(row.trace_json),
            json.loads(row.run_secs_json),
            json.loads(row.target_json),
            json.loads(row.args_info_json),
        ]
        lines[1].append(json.dumps([index[row.workload_id], body]))
    for values in verdict_rows:
        if values["workload_id"] in index:
            line = verdicts.line(values, index[values["workload_id"]])
            lines[4].append(json.dumps(line, sort_keys=True))
    for path, text in zip(paths, lines, strict=True):  # each whole, then renamed into place
        partial = path.with_name(path.name + ".partial")
        partial.write_text("".join(line + "\n" for line in text), encoding="utf-8")
        partial.replace(path)
    return CopySummary(workloads=len(index), records=len(rows), added=len(rows))


def _info_of(wl: WorkloadRow, index: int) -> dict[str, Any]:
    """The line of :data:`INFO_FILE` that describes one workload row (line ``index`` of
    :data:`WORKLOAD_FILE`)."""
    return {
        "index": index,
        "shash": wl.shash,
        "task_name": wl.task_name,
        "family_shash": wl.family_shash,
        "bucket": json.loads(wl.bucket_json) if wl.bucket_json else None,
    }


def _generic_line(values: dict[str, Any]) -> str:
    """The line of :data:`GENERIC_FILE` of one generic run (its column values)."""
    keys = ("family_shash", "target_key", "target_kind", "target_arch", "device")
    return json.dumps(
        {
            **{k: values[k] for k in keys},
            "bucket": json.loads(values["bucket_json"]),
            "run_secs": json.loads(values["run_secs_json"]),
        },
        sort_keys=True,
    )


def _read_generic_runs(path: Path) -> list[dict[str, Any]]:
    """The generic runs of :data:`GENERIC_FILE` as column values, every line checked (none
    when the folder has no such file)."""
    if not path.exists():
        return []
    out = []
    for lineno, entry in _lines(path):
        where = f"{path}:{lineno}"
        strings = ("family_shash", "target_key", "target_kind")
        optional = ("target_arch", "device")
        if not (
            isinstance(entry, dict)
            and all(isinstance(entry.get(k), str) for k in strings)
            and all(entry.get(k) is None or isinstance(entry[k], str) for k in optional)
            and isinstance(entry.get("bucket"), dict)
            and all(type(v) is int for v in entry["bucket"].values())
        ):
            raise DatabaseError(
                f"{where}: expected a generic run (family_shash, bucket of integers, "
                "target_key, target_kind, run_secs)"
            )
        secs = _run_secs(entry.get("run_secs"), where)
        if secs is None:
            raise DatabaseError(f"{where}: a generic run has no failed times")
        # the file names the target by key, kind and arch: all a generic run stores of it
        key, kind, arch = entry["target_key"], entry["target_kind"], entry.get("target_arch")
        target = TargetKey(key=key, json="", kind=kind, arch=arch)
        values = generic_run_values(
            entry["family_shash"], entry["bucket"], target, secs, entry.get("device")
        )
        del values["job_id"]  # a copy names no job of its source
        out.append(values)
    return out


def _read_verdicts(path: Path, workloads: list[Workload]) -> list[tuple[int, dict[str, Any]]]:
    """The verdicts of :data:`VERDICT_FILE` (workload line, column values), every line
    checked (none when the folder has no such file)."""
    if not path.exists():
        return []
    out = []
    for lineno, entry in _lines(path):
        where = f"{path}:{lineno}"
        found = verdicts.from_line(entry)
        if found is None:
            raise DatabaseError(
                f"{where}: expected a verdict (index, target_key, winner among compared, "
                "rounds, created_at)"
            )
        if found[0] >= len(workloads):
            raise DatabaseError(f"{where}: workload index {found[0]} out of range")
        out.append(found)
    return out


def _read_infos(path: Path) -> dict[int | str, WorkloadLabels]:
    """TuneFarm's workload facts beside a stock export, by line of :data:`WORKLOAD_FILE`
    (``index``), or by structural hash in files written before it had one (none: {})."""
    if not path.exists():
        return {}
    infos: dict[int | str, WorkloadLabels] = {}
    for lineno, entry in _lines(path):
        where = f"{path}:{lineno}"
        if not isinstance(entry, dict) or not isinstance(entry.get("shash"), str):
            raise DatabaseError(f"{where}: expected an object with a 'shash'")
        index = entry.get("index")
        if index is not None and not (type(index) is int and index >= 0):
            raise DatabaseError(f"{where}: 'index' must be a line number of {WORKLOAD_FILE}")
        name, family, bucket = (
            entry.get("task_name"),
            entry.get("family_shash"),
            entry.get("bucket"),
        )
        if name is not None and not isinstance(name, str):
            raise DatabaseError(f"{where}: 'task_name' must be a string")
        if (family is None) != (bucket is None):
            raise DatabaseError(f"{where}: 'family_shash' and 'bucket' go together")
        if bucket is not None and not (
            isinstance(family, str)
            and isinstance(bucket, dict)
            and all(isinstance(k, str) and type(v) is int for k, v in bucket.items())
        ):
            raise DatabaseError(f"{where}: 'bucket' must map variable names to integers")
        infos[entry["shash"] if index is None else index] = WorkloadLabels(
            task_name=name, family=(family, bucket) if family is not None else None
        )
    return infos


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as err:
        raise DatabaseError(f"cannot read {path}: {err.strerror}") from None
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise DatabaseError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None


def _run_secs(value: Any, where: str) -> list[float] | None:
    """Validated run times; None for a failed run (stock's 1e10 s)."""
    if not isinstance(value, list) or not value:
        raise DatabaseError(f"{where}: empty or missing run times")
    try:
        secs = [float(s) for s in value]
    except (TypeError, ValueError):
        raise DatabaseError(f"{where}: run times are not numbers: {value!r}"[:200]) from None
    if any(not math.isfinite(s) or s <= 0 for s in secs):
        raise DatabaseError(f"{where}: run times must be positive and finite: {secs}"[:200])
    return None if any(s >= FAILED_RUN_SEC for s in secs) else secs


def import_metaschedule(storage: Storage, src: Path) -> CopySummary:
    """Read a stock MetaSchedule database (a work_dir or a folder with its two files).

    Every line is parsed and checked before anything is written; then all of it is stored
    in one transaction.
    """
    if not src.is_dir():
        raise DatabaseError(f"not a folder: {src} (expected a MetaSchedule work_dir)")
    wpath, rpath = src / WORKLOAD_FILE, src / RECORD_FILE
    for path in (wpath, rpath):
        if not path.exists():
            raise DatabaseError(f"{src} has no {path.name}: not a MetaSchedule database")
    workloads: list[Workload] = []
    for lineno, entry in _lines(wpath):
        try:
            workloads.append(Workload.from_json(entry))
        except Exception as err:  # TVM's parser raises RuntimeError/ValueError/TypeError
            raise DatabaseError(
                f"{wpath}:{lineno}: not a workload ({error_summary(err)})"
            ) from None
    infos = _read_infos(src / INFO_FILE)
    info_of = [
        infos.get(i) or infos.get(shash_of(w.mod)) or WorkloadLabels()
        for i, w in enumerate(workloads)
    ]
    items: list[tuple[Measurement, WorkloadLabels]] = []
    for lineno, entry in _lines(rpath):
        where = f"{rpath}:{lineno}"
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)):
            raise DatabaseError(f"{where}: expected [workload_index, record]")
        index, body = entry
        if not 0 <= index < len(workloads):
            raise DatabaseError(f"{where}: workload index {index} out of range")
        if not (isinstance(body, list) and len(body) == 4):
            raise DatabaseError(f"{where}: expected [trace, run_secs, target, args_info]")
        secs = _run_secs(body[1], where)
        workload = workloads[index]
        try:
            measurement = Measurement.from_record(
                TuningRecord.from_json(body, workload),
                run_secs=secs,
                error_kind=None if secs else "run_error",
                error_msg=None if secs else "failed run (imported from MetaSchedule)",
                worker=f"import:{src.name}",
            )
        except Exception as err:
            raise DatabaseError(f"{where}: not a tuning record ({error_summary(err)})") from None
        items.append((measurement, info_of[index]))
    generics = _read_generic_runs(src / GENERIC_FILE)
    copied = [(workloads[i], values) for i, values in _read_verdicts(src / VERDICT_FILE, workloads)]
    job = {"name": f"import {src}", "target_json": "{}", "budget": 0, "status": "imported"}
    added = add_many(storage, items, job=job, generic_runs=generics, verdicts=copied)
    return CopySummary(workloads=len(workloads), records=len(items), added=added)


# ------------------------------------------------------------------ teammates' databases
def merge(storage: Storage, other_url: str) -> CopySummary:
    """Fold another TuneFarm database in: every record it has that this one lacks, with its
    provenance (device, worker, time, job). The best per (workload, target, device) follows.
    """
    other = Storage(other_url, create=False)
    if other.engine.url == storage.engine.url:
        raise DatabaseError("cannot merge a database into itself")

    def load(session: Session) -> tuple[list[Any], ...]:
        jobs = list(session.scalars(select(JobRow).order_by(JobRow.id)))
        rows = list(_stream(session, None))
        return rows, jobs, _generic_runs(session), verdicts.rows(session)

    rows, jobs, generics, verdict_rows = other.run(load, write=False)
    other.dispose()
    modules: dict[int, Workload] = {}
    items: list[tuple[Measurement, WorkloadLabels]] = []
    for row, mod_json, wl in rows:
        if row.workload_id not in modules:
            modules[row.workload_id] = Workload(tvm.ir.load_json(mod_json))
        family = (
            (wl.family_shash, json.loads(wl.bucket_json))
            if wl.family_shash and wl.bucket_json
            else None
        )
        try:
            measurement = Measurement(
                workload=modules[row.workload_id],
                candidate_hash=row.candidate_hash,
                trace_json=json.loads(row.trace_json),
                args_info_json=json.loads(row.args_info_json),
                run_secs=json.loads(row.run_secs_json) if row.run_secs_json else None,
                target=tvm.target.Target(json.loads(row.target_json)),
                error_kind=row.error_kind,
                error_msg=row.error_msg,
                device=row.device,
                worker=row.worker,
                job_id=row.job_id,  # remapped to the copied job below
                build_sec=row.build_sec,
                created_at=row.created_at,
            )
        except (ValueError, TypeError, json.JSONDecodeError) as err:
            raise DatabaseError(
                f"{redact(other_url)}: record {row.id}: {error_summary(err)}"
            ) from None
        items.append((measurement, WorkloadLabels(task_name=wl.task_name, family=family)))
    source = redact(other_url)
    copied = [
        {
            "old_id": j.id,
            "name": f"{j.name} (merged from {source})"[:256],
            "status": j.status,
            "model": j.model,
            "target_json": j.target_json,
            "budget": j.budget,
            "trials_done": j.trials_done,
            "submitted_by": j.submitted_by,
            "config_json": j.config_json,
            "started_at": j.started_at,
            "finished_at": j.finished_at,
            "error": j.error,
        }
        for j in jobs
    ]
    judged = [(modules[v["workload_id"]], v) for v in verdict_rows if v["workload_id"] in modules]
    added = add_many(storage, items, copy_jobs=copied, generic_runs=generics, verdicts=judged)
    return CopySummary(workloads=len(modules), records=len(items), added=added)


def _generic_runs(session: Session) -> list[dict[str, Any]]:
    """Every generic-code time (:class:`~database.models.GenericRun`), as column values
    without the row's id and job (a copy names no job of its source)."""
    skip = {"id", "job_id"}
    return [
        {c: getattr(row, c) for c in _columns(GenericRun) if c not in skip}
        for row in session.scalars(select(GenericRun).order_by(GenericRun.id))
    ]


# ------------------------------------------------------------------ schedule packs
def export_pack(storage: Storage, path: Path, *, force: bool = False) -> CopySummary:
    """Write the best record per (workload, target) into a new read-only SQLite file."""
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory: --format sqlite writes a file")
    if path.exists():
        if not force:
            raise DatabaseError(f"{path} exists (use --force to replace it)")
        path.chmod(0o644)
        path.unlink()
    if not path.parent.is_dir():
        raise DatabaseError(f"folder does not exist: {path.parent}")

    def load(session: Session) -> tuple[list[Any], ...]:
        rows = list(_stream(session, best_record_ids(session)))
        return rows, _generic_runs(session), verdicts.rows(session, {wl.id for *_, wl in rows})

    rows, generics, verdict_rows = storage.run(load, write=False)
    tmp = path.with_name(path.name + ".partial")
    tmp.unlink(missing_ok=True)
    pack = Storage(f"sqlite:///{tmp}")
    try:
        wmap: dict[int, int] = {}

        def write(session: Session) -> None:
            for row, _mod_json, wl in rows:
                if wl.id not in wmap:
                    copy = WorkloadRow(
                        **{c: getattr(wl, c) for c in _columns(WorkloadRow) if c != "id"}
                    )
                    session.add(copy)
                    session.flush()
                    wmap[wl.id] = copy.id
                values = {c: getattr(row, c) for c in _columns(RecordRow) if c != "id"}
                values.update(workload_id=wmap[wl.id], job_id=None)
                session.add(RecordRow(**values))
            for values in generics:  # the build's dispatch weighs them
                session.add(GenericRun(**values))
            for values in verdict_rows:  # and picks as its source picks
                verdicts.insert_copy(
                    session, {**values, "workload_id": wmap[values["workload_id"]]}
                )
            session.merge(
                MetaRow(
                    key="pack",
                    value=json.dumps(
                        {"source": redact(str(storage.url)), "created": utcnow().isoformat()}
                    ),
                )
            )

        pack.run(write)
    finally:
        pack.dispose()
    conn = sqlite3.connect(tmp)  # one self-contained file: no WAL beside it
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("VACUUM")
    conn.close()
    tmp.rename(path)
    path.chmod(0o444)
    return CopySummary(workloads=len(wmap), records=len(rows), added=len(rows))


def _columns(model: type) -> list[str]:
    return [c.name for c in model.__table__.columns]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ pruning
ScheduleKey = tuple[int, str, str | None, str]  # workload, target key, device key, candidate


def _valid_records(conn: Any) -> list[tuple[int, ScheduleKey, list[float], Any]]:
    """(id, schedule per device, run times, created at) of every valid record."""
    rows = conn.execute(
        select(
            RecordRow.id,
            RecordRow.workload_id,
            RecordRow.target_key,
            RecordRow.device_key,
            RecordRow.candidate_hash,
            RecordRow.run_secs_json,
            RecordRow.created_at,
        ).where(RecordRow.mean_sec.is_not(None))
    ).all()
    return [(r[0], (r[1], r[2], r[3], r[4]), json.loads(r[5]), r[6]) for r in rows]


def _schedule_ranks(
    records: list[tuple[int, ScheduleKey, list[float], Any]],
    judged: dict[tuple[int, str], verdicts.Verdict],
) -> dict[ScheduleKey, int]:
    """Each schedule's rank (1 = the best by its evidence, :mod:`database.evidence`, with
    the re-timing's verdict ``judged`` applied as the build applies it) per (workload,
    target, device)."""
    runs: dict[ScheduleKey, list[tuple[int, list[float]]]] = {}
    for rid, key, secs, _created in records:
        runs.setdefault(key, []).append((rid, secs))
    parts: dict[tuple[Any, ...], list[tuple[tuple[float, int, int], ScheduleKey]]] = {}
    for key, pooled in runs.items():
        parts.setdefault(key[:3], []).append((evidence.Evidence.pool(pooled).key(), key))
    ranks: dict[ScheduleKey, int] = {}
    for (wid, tkey, _device), items in parts.items():
        order = [key for _, key in sorted(items)]
        verdict = judged.get((wid, tkey))
        if (
            verdict is not None
            and order[0][3] != verdict.winner
            and order[0][3] in verdict.compared
        ):
            order.sort(key=lambda k: k[3] != verdict.winner)  # stable: the winner first
        for rank, key in enumerate(order, 1):
            ranks[key] = rank
    return ranks


MAX_KEEP_TOP = 1_000_000_000  # fits every database's integers
MAX_AGE_DAYS = 36_500  # a hundred years; far older cutoffs overflow a datetime


@dataclass(frozen=True)
class PrunePlan:
    """Records a prune removes."""

    failed: int
    beyond_top: int
    older: int

    @property
    def total(self) -> int:
        return self.failed + self.beyond_top + self.older


def prune(
    storage: Storage,
    *,
    keep_top: int | None = None,
    failed: bool = False,
    older_than_days: float | None = None,
    dry_run: bool = False,
) -> PrunePlan:
    """Delete failed records, the records of schedules beyond the best ``keep_top`` per
    (workload, target, device), and/or valid records older than some days that are not of
    such a best. Every record of the best schedule of each (workload, target, device)
    (:mod:`database.evidence`) is always kept."""
    if keep_top is not None and not 1 <= keep_top <= MAX_KEEP_TOP:
        raise DatabaseError(f"--keep-top must be between 1 and {MAX_KEEP_TOP} (got {keep_top})")
    if older_than_days is not None and not (
        math.isfinite(older_than_days) and 0 <= older_than_days <= MAX_AGE_DAYS
    ):
        raise DatabaseError(
            f"--older-than must be a number of days between 0 and {MAX_AGE_DAYS} "
            f"(got {older_than_days})"
        )

    def work(session: Session) -> PrunePlan:
        failed_ids = (
            list(session.scalars(select(RecordRow.id).where(RecordRow.mean_sec.is_(None))))
            if failed
            else []
        )
        top_ids: list[int] = []
        old_ids: list[int] = []
        if keep_top is not None or older_than_days is not None:
            records = _valid_records(session.connection())
            ranks = _schedule_ranks(records, verdicts.newest(session.connection()))
            cutoff = naive_utc(utcnow() - dt.timedelta(days=older_than_days or 0))
            for rid, key, _secs, created in records:
                if ranks[key] == 1:
                    continue  # every run of the best schedule stays
                if keep_top is not None and ranks[key] > keep_top:
                    top_ids.append(rid)
                elif older_than_days is not None and naive_utc(created) < cutoff:
                    old_ids.append(rid)
        plan = PrunePlan(failed=len(failed_ids), beyond_top=len(top_ids), older=len(old_ids))
        if not dry_run:
            ids = failed_ids + top_ids + old_ids
            for start in range(0, len(ids), 500):
                session.execute(delete(RecordRow).where(RecordRow.id.in_(ids[start : start + 500])))
        return plan

    return storage.run(work, write=not dry_run)
