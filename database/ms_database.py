"""MetaSchedule's ``Database`` interface on top of TuneFarm's SQL storage.

The search's own warm start (``get_top_k``), the task scheduler and
``relax.transform.MetaScheduleApplyDatabase`` all work through this class. Unlike stock
MetaSchedule, lookups are target-aware: records of another target kind are never used.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import statistics
from dataclasses import dataclass
from typing import Any, NamedTuple

import tvm
import tvm_ffi
from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload

from database.models import EMPTY_TRACE, JobRow, RecordRow, WorkloadRow
from database.storage import Storage
from database.targets import TargetKey
from database.transfer import adapt_trace, bucket_distance

log = logging.getLogger("tunefarm.database")

# Lookup levels, most specific first: the same device (fingerprint) and target, the same
# target, the same target kind and architecture, the same target kind. Never across kinds.
LOOKUP_LEVELS = ("device", "target", "arch", "kind")


class BestRecord(NamedTuple):
    """What :meth:`TuneFarmDatabase.best` found: the record, the lookup level that found it
    (one of ``LOOKUP_LEVELS``) and its mean run time in seconds."""

    record: TuningRecord
    level: str
    mean_sec: float


def shash_of(obj: Any) -> str:
    """Structural hash of a TVM object as 16 hex digits."""
    return format(tvm_ffi.structural_hash(obj) & (2**64 - 1), "016x")


@dataclass(frozen=True)
class Measurement:
    """One measured (or failed) candidate, with its provenance, ready to store."""

    workload: Workload
    candidate_hash: str
    trace_json: Any
    args_info_json: Any
    run_secs: list[float] | None
    target: tvm.target.Target
    error_kind: str | None = None
    error_msg: str | None = None
    device: str | None = None
    worker: str | None = None
    job_id: int | None = None
    build_sec: float | None = None
    created_at: dt.datetime | None = None  # kept by import and merge; now when None

    def __post_init__(self) -> None:
        if self.error_kind is None:
            secs = self.run_secs or []
            if not secs or any(not math.isfinite(s) or s <= 0 for s in secs):
                raise ValueError(f"a valid measurement needs positive finite run times: {secs}")


def device_key(device: str | None) -> str | None:
    """The indexed key of a device fingerprint."""
    return hashlib.sha1(device.encode()).hexdigest() if device else None


@dataclass(frozen=True)
class WorkloadLabels:
    """The labels stored with a workload besides its module: its task's name and its kernel
    family (family structural hash, bucket)."""

    task_name: str | None = None
    family: tuple[str, dict[str, int]] | None = None


class WorkloadIds:
    """Row ids of workloads seen in one batch, found by identity first, then by structure.

    Never keyed by ``id()`` of an object it does not hold: ``Workload.mod`` returns a new
    wrapper on each access, freed at once, so its address is reused by unrelated modules.
    Each entry holds the objects it was keyed by, so an address cannot be reused while the
    batch lasts; a miss on identity falls back to structural hash and equality.
    """

    def __init__(self) -> None:
        self._by_identity: dict[int, tuple[Workload, int]] = {}
        self._by_shash: dict[str, list[tuple[IRModule, int]]] = {}
        self._shash: dict[int, tuple[IRModule, str]] = {}

    def shash(self, mod: IRModule) -> str:
        """The structural hash of ``mod`` (computed once per held module)."""
        held = self._shash.get(id(mod))
        if held is not None and held[0] is mod:
            return held[1]
        value = shash_of(mod)
        self._shash[id(mod)] = (mod, value)
        return value

    def get(self, workload: Workload) -> int | None:
        """The row id of ``workload`` when this batch has seen it (or an equal module)."""
        held = self._by_identity.get(id(workload))
        if held is not None and held[0] is workload:
            return held[1]
        mod = workload.mod
        for known, wid in self._by_shash.get(self.shash(mod), []):
            if tvm_ffi.structural_equal(known, mod):
                self._by_identity[id(workload)] = (workload, wid)
                return wid
        return None

    def put(self, workload: Workload, mod: IRModule, wid: int) -> None:
        """Remember that ``workload`` (whose module is ``mod``) is row ``wid``."""
        self._by_identity[id(workload)] = (workload, wid)
        self._by_shash.setdefault(self.shash(mod), []).append((mod, wid))


def workload_row_id(
    session: Session,
    mod: IRModule,
    *,
    shash: str,
    create: bool,
    task_name: str | None = None,
    family: tuple[str, dict[str, int]] | None = None,
) -> int | None:
    """Find (or with ``create`` add) the workload row of ``mod`` inside ``session``.

    Workloads are matched by structural equality, so there is no unique constraint to lean
    on: PostgreSQL serializes creators of one hash with a transaction advisory lock, SQLite
    with its write transactions (BEGIN IMMEDIATE).
    """
    if create and session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": int(shash, 16) - 2**63})
    rows = session.execute(
        select(WorkloadRow.id, WorkloadRow.mod_json).where(WorkloadRow.shash == shash)
    ).all()
    for wid, mod_json in rows:
        if tvm_ffi.structural_equal(tvm.ir.load_json(mod_json), mod):
            if family is not None:  # a static workload first seen outside a bucket
                row = session.get(WorkloadRow, wid)
                if row is not None and row.family_shash is None:
                    row.family_shash = family[0]
                    row.bucket_json = json.dumps(family[1], sort_keys=True)
            return wid
    if not create:
        return None
    row = WorkloadRow(
        shash=shash,
        mod_json=tvm.ir.save_json(mod),
        task_name=task_name,
        family_shash=family[0] if family else None,
        bucket_json=json.dumps(family[1], sort_keys=True) if family else None,
        flops=_flops(mod),
        tvm_version=tvm.__version__,
    )
    session.add(row)
    session.flush()
    return row.id


def record_values(m: Measurement, wid: int) -> dict[str, Any]:
    """The column values of a measurement's record row."""
    tkey = TargetKey.of(m.target)
    secs = m.run_secs if m.error_kind is None else None
    return {
        "workload_id": wid,
        "candidate_hash": m.candidate_hash,
        "trace_json": json.dumps(m.trace_json),
        "args_info_json": json.dumps(m.args_info_json),
        "run_secs_json": json.dumps(secs) if secs else None,
        "mean_sec": statistics.fmean(secs) if secs else None,
        "std_sec": statistics.pstdev(secs) if secs else None,
        "target_key": tkey.key,
        "target_json": tkey.json,
        "target_kind": tkey.kind,
        "target_arch": tkey.arch,
        "device": m.device,
        "device_key": device_key(m.device),
        "worker": m.worker,
        "job_id": m.job_id,
        "error_kind": m.error_kind,
        "error_msg": (m.error_msg or "")[:2000] or None,
        "build_sec": m.build_sec,
        **({"created_at": m.created_at} if m.created_at is not None else {}),
    }


def _best_queries(limit: int | None = 1) -> dict[str, Any]:
    """One prepared statement per lookup level, each served by one index."""
    cols = (
        RecordRow.trace_json,
        RecordRow.run_secs_json,
        RecordRow.target_json,
        RecordRow.args_info_json,
        RecordRow.mean_sec,
    )
    base = (
        select(*cols)
        .where(RecordRow.workload_id == bindparam("wid"), RecordRow.mean_sec.is_not(None))
        .order_by(RecordRow.mean_sec, RecordRow.id)
        .limit(limit)
    )
    return {
        "device": base.where(
            RecordRow.device_key == bindparam("dkey"), RecordRow.target_key == bindparam("tkey")
        ),
        "target": base.where(RecordRow.target_key == bindparam("tkey")),
        "arch": base.where(
            RecordRow.target_kind == bindparam("kind"), RecordRow.target_arch == bindparam("arch")
        ),
        "kind": base.where(RecordRow.target_kind == bindparam("kind")),
    }


_BEST_QUERIES = _best_queries()
_RANKED_QUERIES = _best_queries(limit=None)  # every valid record, when the best cannot serve


@derived_object
class TuneFarmDatabase(PyDatabase):
    """A MetaSchedule database stored in SQL (SQLite or PostgreSQL).

    ``target`` scopes what the search sees (``get_top_k``) to records of that exact target;
    ``device`` (a fingerprint) enables the exact-device level of ``best``. ``seeds``: how many
    best schedules of the nearest other buckets of the same symbolic kernel ``get_top_k``
    adds, refitted to the workload's shape (:mod:`database.transfer`); 0 (the default): none.
    """

    def __init__(
        self,
        storage: Storage,
        target: tvm.target.Target | None = None,
        device: str | None = None,
        seeds: int = 0,
    ) -> None:
        super().__init__()
        self.storage = storage
        self.scope = TargetKey.of(target) if target is not None else None
        self.target = target
        self.device = device
        self.seeds = seeds
        self._adapted: dict[tuple[int, str], Any] = {}  # (workload id, trace) -> seed | None
        self._ids: dict[str, list[tuple[IRModule, int]]] = {}
        self._workloads: dict[int, Workload] = {}
        self._by_identity: dict[int, tuple[IRModule, int]] = {}  # holds mod: ids stay unique
        self._unusable: dict[tuple[int, str], bool] = {}  # (workload id, trace) -> unusable

    # ---------------------------------------------------------------- workloads
    def workload_id(
        self,
        mod: IRModule,
        *,
        create: bool = False,
        task_name: str | None = None,
        family: tuple[str, dict[str, int]] | None = None,
    ) -> int | None:
        """The row id of ``mod``'s workload; with ``create``, add it when missing."""
        same = self._by_identity.get(id(mod))
        if same is not None and same[0] is mod:
            return same[1]
        shash = shash_of(mod)
        for known, wid in self._ids.get(shash, []):
            if tvm_ffi.structural_equal(known, mod):
                self._by_identity[id(mod)] = (mod, wid)
                return wid
        wid = self.storage.run(
            lambda s: workload_row_id(
                s, mod, shash=shash, create=create, task_name=task_name, family=family
            ),
            write=create or family is not None,
        )
        if wid is not None:
            self._ids.setdefault(shash, []).append((mod, wid))
            self._by_identity[id(mod)] = (mod, wid)
        return wid

    def _workload(self, wid: int, mod: IRModule) -> Workload:
        if wid not in self._workloads:
            self._workloads[wid] = Workload(mod)
        return self._workloads[wid]

    def has_workload(self, mod: IRModule) -> bool:
        return self.workload_id(mod) is not None

    def commit_workload(self, mod: IRModule) -> Workload:
        wid = self.workload_id(mod, create=True)
        assert wid is not None
        return self._workload(wid, mod)

    # ---------------------------------------------------------------- records
    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Store a record as MetaSchedule's callbacks hand it over; never raises on its values.

        Stock databases store whatever the runner returned. Here a run with no times or a
        failed run (stock's 1e10 s) is stored as a ``run_error``, and times that are not
        positive and finite (a runner that reported 0.0) as ``invalid_result``: kept and counted,
        never chosen as a best.
        """
        trace, run_secs, _target, args_info = record.as_json()
        secs = [float(s) for s in run_secs] if run_secs else None
        error_kind, error_msg = None, None
        if not secs or any(s >= 1e9 for s in secs):
            error_kind = "run_error"
        elif any(not math.isfinite(s) or s <= 0 for s in secs):
            error_kind, error_msg = "invalid_result", f"run times not positive and finite: {secs}"
        self.add(
            Measurement(
                workload=record.workload,
                candidate_hash=candidate_hash_of_trace(record.trace, record.workload.mod),
                trace_json=trace,
                args_info_json=args_info,
                run_secs=secs if error_kind is None else None,
                target=record.target,
                error_kind=error_kind,
                error_msg=error_msg,
            )
        )

    def add(self, m: Measurement) -> bool:
        """Store one measurement; False when that candidate was already stored."""
        wid = self.workload_id(m.workload.mod, create=True)
        assert wid is not None
        stmt = self._insert_record(record_values(m, wid))
        return self.storage.run(lambda s: s.execute(stmt).scalar()) is not None

    def add_many(
        self,
        items: list[tuple[Measurement, WorkloadLabels]],
        *,
        job: dict[str, Any] | None = None,
        copy_jobs: list[dict[str, Any]] | None = None,
    ) -> int:
        """Store measurements with their workloads in ONE transaction; returns how many were new.

        Used by import and merge: either everything lands or nothing does. ``job`` creates a
        job row that the records point to; ``copy_jobs`` copies other jobs (each with its
        ``old_id``), and records' ``job_id`` are mapped from the old ids to the copies.
        """

        def write(session: Session) -> int:
            import_job: int | None = None
            if job is not None:
                row = JobRow(**job)
                session.add(row)
                session.flush()
                import_job = row.id
            pending = {fields["old_id"]: fields for fields in copy_jobs or []}
            copied: dict[int, int] = {}

            def copy_of(old: int) -> int | None:
                # a teammate's job is copied once, and only when one of its records is new
                if old not in copied and old in pending:
                    fields = {k: v for k, v in pending[old].items() if k != "old_id"}
                    row = JobRow(**fields)
                    session.add(row)
                    session.flush()
                    copied[old] = row.id
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
                rid = session.execute(self._insert_record(values)).scalar()
                if rid is None:
                    continue
                added += 1
                if m.job_id is not None and copy_jobs is not None:
                    session.execute(
                        update(RecordRow)
                        .where(RecordRow.id == rid)
                        .values(job_id=copy_of(m.job_id))
                    )
            return added

        return self.storage.run(write)

    def _insert_record(self, values: dict[str, Any]) -> Any:
        insert = postgresql.insert if self.storage.dialect == "postgresql" else sqlite.insert
        return (
            insert(RecordRow)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["workload_id", "target_key", "candidate_hash"])
            .returning(RecordRow.id)
        )

    def _to_record(self, row: RecordRow, workload: Workload) -> TuningRecord:
        return TuningRecord.from_json(
            [
                json.loads(row.trace_json),
                json.loads(row.run_secs_json) if row.run_secs_json else None,
                json.loads(row.target_json),
                json.loads(row.args_info_json),
            ],
            workload,
        )

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        if top_k <= 0:
            return []
        wid = self.workload_id(workload.mod)
        if wid is None:
            return []
        query = (
            select(RecordRow)
            .where(RecordRow.workload_id == wid, RecordRow.mean_sec.is_not(None))
            .order_by(RecordRow.mean_sec)
            .limit(top_k)
        )
        if self.scope is not None:
            query = query.where(RecordRow.target_key == self.scope.key)
        rows = self.storage.run(lambda s: list(s.scalars(query)), write=False)
        own = [self._to_record(row, workload) for row in rows]
        if len(own) >= top_k or self.seeds <= 0 or self.scope is None:
            return own
        seeds = [
            TuningRecord(trace, workload, None, self.target, None)
            for trace in self._sibling_seeds(wid, workload.mod)
        ]
        return own + seeds[: top_k - len(own)]

    def _sibling_seeds(self, wid: int, mod: IRModule) -> list[Any]:
        """The best traces of the nearest other buckets of ``wid``'s family, refitted to
        ``mod`` (one query per call; each trace is adapted once per database object)."""
        assert self.scope is not None

        def load(session: Session) -> tuple[Any, list[tuple[Any, ...]]]:
            me = session.get(WorkloadRow, wid)
            if me is None or me.family_shash is None or me.bucket_json is None:
                return None, []
            best = (
                select(
                    RecordRow.workload_id,
                    RecordRow.trace_json,
                    func.row_number()
                    .over(partition_by=RecordRow.workload_id, order_by=RecordRow.mean_sec)
                    .label("rank"),
                )
                .join(WorkloadRow, WorkloadRow.id == RecordRow.workload_id)
                .where(
                    WorkloadRow.family_shash == me.family_shash,
                    RecordRow.workload_id != wid,
                    RecordRow.mean_sec.is_not(None),
                    RecordRow.target_key == self.scope.key,
                )
                .subquery()
            )
            query = (
                select(WorkloadRow.bucket_json, WorkloadRow.mod_json, best.c.trace_json)
                .join(best, best.c.workload_id == WorkloadRow.id)
                .where(best.c.rank <= 4)
            )
            return json.loads(me.bucket_json), list(session.execute(query))

        bucket, rows = self.storage.run(load, write=False)
        out: list[Any] = []
        if bucket is not None:
            rows.sort(key=lambda r: bucket_distance(json.loads(r[0]), bucket))
            mods: dict[str, IRModule] = {}
            for _bucket, mod_json, trace_json in rows:
                if len(out) >= self.seeds:
                    break
                key = (wid, trace_json)
                if key not in self._adapted:
                    if mod_json not in mods:
                        mods[mod_json] = tvm.ir.load_json(mod_json)
                    self._adapted[key] = _adapt(trace_json, mods[mod_json], mod)
                if self._adapted[key] is not None:
                    out.append(self._adapted[key])
        return out

    def get_all_tuning_records(self) -> list[TuningRecord]:
        def load(session: Session) -> list[tuple[RecordRow, str]]:
            return list(
                session.execute(
                    select(RecordRow, WorkloadRow.mod_json)
                    .join(WorkloadRow)
                    .where(RecordRow.mean_sec.is_not(None))
                    .order_by(RecordRow.id)
                ).tuples()
            )

        out = []
        for row, mod_json in self.storage.run(load, write=False):
            mod = tvm.ir.load_json(mod_json)
            out.append(self._to_record(row, self._workload(row.workload_id, mod)))
        return out

    def __len__(self) -> int:
        return int(
            self.storage.run(lambda s: s.scalar(select(func.count(RecordRow.id))), write=False) or 0
        )

    # ---------------------------------------------------------------- lookups
    def best_row(
        self,
        mod: IRModule,
        target: tvm.target.Target,
        device: str | None = None,
        *,
        unusable: frozenset[str] = frozenset(),
    ) -> tuple[int, str, Any] | None:
        """The row behind ``best``, unparsed: (workload id, level, row); rows whose trace is
        in ``unusable`` are passed over."""
        wid = self.workload_id(mod)
        if wid is None:
            return None
        tkey = TargetKey.of(target)
        params = {
            "wid": wid,
            "dkey": device_key(device or self.device),
            "tkey": tkey.key,
            "kind": tkey.kind,
            "arch": tkey.arch,
        }
        levels = [
            level
            for level in LOOKUP_LEVELS
            if not (level == "device" and params["dkey"] is None)
            and not (level == "arch" and tkey.arch is None)
        ]

        def lookup(session: Session) -> tuple[str, Any] | None:
            conn = session.connection()
            for level in levels:
                if not unusable:
                    row = conn.execute(_BEST_QUERIES[level], params).first()
                else:
                    rows = conn.execute(_RANKED_QUERIES[level], params)
                    row = next((r for r in rows if r.trace_json not in unusable), None)
                if row is not None:
                    return level, row
            return None

        found = self.storage.run(lookup, write=False)
        return (wid, *found) if found is not None else None

    def best(
        self, mod: IRModule, target: tvm.target.Target, device: str | None = None
    ) -> BestRecord | None:
        """The best valid record of ``mod`` for ``target``, with its lookup level.

        Levels (``LOOKUP_LEVELS``), most specific first: ``device`` (same target measured on a
        device with the same fingerprint, default ``self.device``), ``target`` (same target),
        ``arch`` (same kind and architecture), ``kind`` (same target kind). Each level is one
        indexed query; records of another target kind are never used.

        A record whose trace does not apply to ``mod`` (a database damaged by an import or
        merge before 2026-11-23: ``tunefarm db check --fix`` repairs it) is passed over with a
        warning, so a build falls back to the next record instead of failing.
        """
        unusable: frozenset[str] = frozenset()
        while True:
            found = self.best_row(mod, target, device, unusable=unusable)
            if found is None:
                return None
            wid, level, row = found
            record = self._usable_record(wid, mod, row)
            if record is not None:
                return BestRecord(record, level, row.mean_sec)
            unusable = unusable | {row.trace_json}

    def _usable_record(self, wid: int, mod: IRModule, row: Any) -> TuningRecord | None:
        """The record of ``row``, or None when its trace does not apply to ``mod``."""
        key = (wid, row.trace_json)
        if self._unusable.get(key):
            return None
        try:
            record = TuningRecord.from_json(
                [
                    json.loads(row.trace_json),
                    json.loads(row.run_secs_json) if row.run_secs_json else None,
                    json.loads(row.target_json),
                    json.loads(row.args_info_json),
                ],
                self._workload(wid, mod),
            )
            if key not in self._unusable:
                record.trace.apply_to_schedule(tvm.s_tir.Schedule(mod), remove_postproc=False)
                self._unusable[key] = False
            return record
        except Exception as err:  # TVM's InternalError/ValueError for a foreign trace
            self._unusable[key] = True
            log.warning(
                "workload %d: a stored record's trace does not apply (%s); skipped. "
                "Run 'tunefarm db check --fix' to repair the database.",
                wid,
                type(err).__name__,
            )
            return None

    def default_schedule_sec(self, mod: IRModule, target: tvm.target.Target) -> float | None:
        """Measured time of ``mod``'s untuned default schedule (an empty trace) on ``target``."""
        wid = self.workload_id(mod)
        if wid is None:
            return None
        query = select(func.min(RecordRow.mean_sec)).where(
            RecordRow.workload_id == wid,
            RecordRow.target_key == TargetKey.of(target).key,
            RecordRow.trace_json == EMPTY_TRACE,
        )
        return self.storage.run(lambda s: s.scalar(query), write=False)

    def query_tuning_record(
        self, mod: IRModule, target: tvm.target.Target, workload_name: str | None = None
    ) -> TuningRecord | None:
        found = self.best(mod, target)
        return found[0] if found else None

    def family_workloads(self, family_shash: str) -> list[tuple[dict[str, int], IRModule]]:
        """The bucket-specialized workloads of a symbolic kernel: (bucket values, module)."""
        query = select(WorkloadRow.bucket_json, WorkloadRow.mod_json).where(
            WorkloadRow.family_shash == family_shash, WorkloadRow.bucket_json.is_not(None)
        )
        rows = self.storage.run(lambda s: list(s.execute(query)), write=False)
        return [(json.loads(b), tvm.ir.load_json(m)) for b, m in rows]

    # ---------------------------------------------------------------- measured set
    def measured(self, candidate_hash: str, target: tvm.target.Target) -> RecordRow | None:
        """The stored measurement of a candidate on this exact target, if any."""
        tkey = TargetKey.of(target)
        query = (
            select(RecordRow)
            .where(RecordRow.candidate_hash == candidate_hash, RecordRow.target_key == tkey.key)
            .limit(1)
        )
        return self.storage.run(lambda s: s.scalars(query).first(), write=False)

    def count_records(self, mod: IRModule, target: tvm.target.Target) -> int:
        """How many candidates of ``mod`` were measured (valid or failed) on ``target``."""
        wid = self.workload_id(mod)
        if wid is None:
            return 0
        tkey = TargetKey.of(target)
        query = select(func.count(RecordRow.id)).where(
            RecordRow.workload_id == wid, RecordRow.target_key == tkey.key
        )
        return int(self.storage.run(lambda s: s.scalar(query), write=False) or 0)

    # ---------------------------------------------------------------- jobs
    def start_job(self, **fields: Any) -> int:
        """Insert a job row; returns its id."""

        def insert(session: Session) -> int:
            row = JobRow(**fields)
            session.add(row)
            session.flush()
            return row.id

        return self.storage.run(insert)

    def update_job(self, job_id: int, **fields: Any) -> None:
        """Update fields of a job row."""

        def update(session: Session) -> None:
            row = session.get(JobRow, job_id)
            if row is not None:
                for key, value in fields.items():
                    setattr(row, key, value)

        self.storage.run(update)


def _adapt(trace_json: str, sibling: IRModule, mod: IRModule) -> Any:
    """Parse a sibling's trace against its own module, then refit it to ``mod``."""
    try:
        trace = TuningRecord.from_json(
            [json.loads(trace_json), None, None, None], Workload(sibling)
        ).trace
    except Exception:
        return None
    return adapt_trace(trace, mod)


def candidate_hash_of_trace(trace: tvm.s_tir.Trace, mod: IRModule) -> str:
    """The candidate hash (structural hash of the scheduled module) of a trace on ``mod``."""
    sch = tvm.s_tir.Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return shash_of(sch.mod)


def _flops(mod: IRModule) -> float | None:
    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:
        return None
