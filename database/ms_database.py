"""MetaSchedule's ``Database`` interface on top of TuneFarm's SQL storage.

The search's own warm start (``get_top_k``), the task scheduler and
``relax.transform.MetaScheduleApplyDatabase`` all work through this class. Unlike stock
MetaSchedule, lookups are target-aware: records of another target kind are never used. What
a record is (measurements, workload identity, the lookup queries) lives in
:mod:`database.records`.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from typing import Any

import tvm
from sqlalchemy import bindparam, distinct, func, select
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload

from database import evidence, verdicts
from database.evidence import Evidence
from database.jobs import set_job_fields
from database.models import EMPTY_TRACE, GenericRun, RecordRow, VerdictRow, WorkloadRow
from database.records import (
    LOOKUP_LEVELS,
    BestRecord,
    Measurement,
    device_key,
    generic_run_values,
    insert_generic_run,
    insert_record,
    insert_records,
    level_filters,
    record_values,
    same_workload,
    shash_of,
    workload_row_id,
)
from database.seeds import family_builds, sibling_seeds
from database.storage import Storage
from database.targets import TargetKey

log = logging.getLogger("tunefarm.database")
# one statement per lookup level, built once (see :func:`database.evidence.stream_query`)
STREAM_QUERIES = {
    level: evidence.stream_query(
        level_filters(level, {k: bindparam(k) for k in ("tkey", "kind", "arch", "dkey")})
    )
    for level in LOOKUP_LEVELS
}


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
            if same_workload(known, mod):
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

        Every commit is a record, as in stock: the same record committed twice is two. The run
        times are stored as committed, and ``get_top_k`` ranks by them as stock does. For
        TuneFarm's own best, a run with no times or a failed run (a 1e10 s stub) is a
        ``run_error``, and times that are not positive and finite (a runner that reported
        0.0) an ``invalid_result``: kept and counted, never chosen as a best.
        """
        secs = [float(s) for s in record.run_secs] if record.run_secs is not None else None
        error_kind, error_msg = None, None
        if not secs or any(s >= 1e9 for s in secs):
            error_kind = "run_error"
        elif any(not math.isfinite(s) or s <= 0 for s in secs):
            error_kind, error_msg = "invalid_result", f"run times not positive and finite: {secs}"
        self.add(Measurement.from_record(record, error_kind=error_kind, error_msg=error_msg))

    def add(self, m: Measurement) -> bool:
        """Store one measurement as a record of its own (True once stored)."""
        wid = self.workload_id(m.workload.mod, create=True)
        assert wid is not None
        stmt = insert_record(record_values(m, wid))
        return self.storage.run(lambda s: s.execute(stmt).scalar()) is not None

    def add_round(
        self, ms: list[Measurement], job: tuple[int, dict[str, Any]] | None = None
    ) -> int:
        """Store a measured round in ONE transaction, with ``job``'s (id, fields) progress
        update when given; returns how many records were stored.

        One commit a round instead of one a record: PostgreSQL sustains a few hundred
        single commits a second, which would cap the farm's throughput (docs/scaling.md).
        """
        wids = [self.workload_id(m.workload.mod, create=True) for m in ms]
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for m, wid in zip(ms, wids, strict=True):
            values = record_values(m, wid)
            groups.setdefault(tuple(values), []).append(values)  # executemany: same columns

        def write(session: Session) -> int:
            added = sum(
                len(session.execute(insert_records(), rows).all()) for rows in groups.values()
            )
            if job is not None:
                set_job_fields(session, job[0], job[1])
            return added

        return self.storage.run(write)

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

    def _replayed(self, wid: int, row: RecordRow, workload: Workload) -> TuningRecord | None:
        """``row`` as a record of ``workload``; None (and a warning, once) when its trace does
        not replay there, so one foreign record cannot stop a search."""
        key = (wid, row.trace_json)
        if self._unusable.get(key):
            return None
        try:
            return self._to_record(row, workload)
        except Exception as err:  # TVM's ScheduleError/InternalError for a foreign trace
            return self._skip(key, err)

    def _skip(self, key: tuple[int, str], err: Exception) -> None:
        """Remember that a stored trace does not apply to its workload, and say so once."""
        self._unusable[key] = True
        log.warning(
            "workload %d: a stored record's trace does not apply (%s); skipped. "
            "Run 'tunefarm db check --fix' to repair the database.",
            key[0],
            type(err).__name__,
        )

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        if top_k <= 0:
            return []
        wid = self.workload_id(workload.mod)
        if wid is None:
            return []
        # stock's order: the mean of the run times as committed, valid records only, stable
        query = (
            select(RecordRow)
            .where(RecordRow.workload_id == wid, RecordRow.rank_sec.is_not(None))
            .order_by(RecordRow.rank_sec, RecordRow.id)
            .limit(top_k)
        )
        if self.scope is not None:
            query = query.where(RecordRow.target_key == self.scope.key)
        rows = self.storage.run(lambda s: list(s.scalars(query)), write=False)
        own = [rec for row in rows if (rec := self._replayed(wid, row, workload)) is not None]
        if len(own) >= top_k or self.seeds <= 0:
            return own
        seeds = [
            TuningRecord(trace, workload, None, self.target, None)
            for trace in self.siblings(workload.mod, self.seeds)
        ]
        return own + seeds[: top_k - len(own)]

    def siblings(self, mod: IRModule, limit: int) -> list[Any]:
        """Up to ``limit`` best traces of the other buckets of ``mod``'s kernel family on this
        database's target, nearest bucket first, refitted to ``mod``
        (:func:`database.seeds.sibling_seeds`); none without a target or a known family."""
        wid = self.workload_id(mod)
        if wid is None or self.scope is None or limit <= 0:
            return []
        return sibling_seeds(self.storage, wid, mod, self.scope.key, limit, self._adapted)

    def family_builds(self, mod: IRModule, limit: int = 256) -> list[tuple[str, float]]:
        """Up to ``limit`` (trace JSON, compile seconds) of the records of ``mod``'s kernel
        family on this database's target, newest first (:func:`database.seeds.family_builds`);
        none without a target or a known workload."""
        wid = self.workload_id(mod)
        if wid is None or self.scope is None or limit <= 0:
            return []
        return family_builds(self.storage, wid, self.scope.key, limit)

    def get_all_tuning_records(self) -> list[TuningRecord]:
        """Every record in commit order, failed ones too (as stock); a record whose trace does
        not replay on its workload is left out with a warning."""

        def load(session: Session) -> list[tuple[RecordRow, str]]:
            return list(
                session.execute(
                    select(RecordRow, WorkloadRow.mod_json).join(WorkloadRow).order_by(RecordRow.id)
                ).tuples()
            )

        out = []
        mods: dict[int, IRModule] = {}
        for row, mod_json in self.storage.run(load, write=False):
            if row.workload_id not in mods:
                mods[row.workload_id] = tvm.ir.load_json(mod_json)
            workload = self._workload(row.workload_id, mods[row.workload_id])
            record = self._replayed(row.workload_id, row, workload)
            if record is not None:
                out.append(record)
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
        unusable: frozenset[tuple[str, str]] = frozenset(),
    ) -> tuple[int, str, Any, Evidence] | None:
        """The best schedule behind ``best``, unparsed: (workload id, level, its first record
        (:data:`database.evidence.ROW_COLUMNS`), its evidence); schedules (target key,
        candidate hash) in ``unusable`` are passed over."""
        wid = self.workload_id(mod)
        if wid is None:
            return None
        tkey = TargetKey.of(target)
        dkey = device_key(device or self.device)
        levels = [
            level
            for level in LOOKUP_LEVELS
            if not (level == "device" and dkey is None)
            and not (level == "arch" and tkey.arch is None)
        ]

        values = {"tkey": tkey.key, "kind": tkey.kind, "arch": tkey.arch, "dkey": dkey}

        def lookup(session: Session) -> tuple[str, Any, Evidence] | None:
            conn = session.connection()
            by_target = verdicts.of_workload(conn, wid)
            for level in levels:
                rows: dict[int, Any] = {}
                bounded = (
                    b
                    for b in evidence.stream(
                        conn, STREAM_QUERIES[level], {"wid": wid, **values}, rows
                    )
                    if b.schedule not in unusable
                )
                where = level_filters(level, values)
                found = evidence.choose(
                    bounded, lambda batch, w=where: evidence.samples(conn, wid, batch, w)
                )
                if found is not None:
                    found = verdicts.prefer(
                        [found],
                        by_target,
                        lambda s, w=where: (
                            None if s in unusable else evidence.pooled(conn, wid, s, w)
                        ),
                    )[0]
                    first = found[1].first_id
                    row = (
                        rows.get(first)
                        or conn.execute(
                            select(*evidence.ROW_COLUMNS).where(RecordRow.id == first)
                        ).one()
                    )
                    return level, row, found[1]
            return None

        found = self.storage.run(lookup, write=False)
        return (wid, *found) if found is not None else None

    def best(
        self, mod: IRModule, target: tvm.target.Target, device: str | None = None
    ) -> BestRecord | None:
        """The best schedule of ``mod`` for ``target``, with its lookup level and evidence.

        The best is the schedule with the lowest median of the run times of all its records
        (:mod:`database.evidence`); its record carries its trace and those pooled run times.
        Levels (``LOOKUP_LEVELS``), most specific first: ``device`` (same target measured on a
        device with the same fingerprint, default ``self.device``), ``target`` (same target),
        ``arch`` (same kind and architecture), ``kind`` (same target kind). Each level reads
        the records of ``mod`` in median order from one index; records of another target kind
        are never used.

        A record whose trace does not apply to ``mod`` (a database damaged by an import or
        merge before 2026-11-23: ``tunefarm db check --fix`` repairs it) is passed over with a
        warning, so a build falls back to the next schedule instead of failing.
        """
        unusable: frozenset[tuple[str, str]] = frozenset()
        while True:
            found = self.best_row(mod, target, device, unusable=unusable)
            if found is None:
                return None
            wid, level, row, ev = found
            record = self._usable_record(wid, mod, row, ev)
            if record is not None:
                return BestRecord(record, level, ev.mean, ev)
            unusable = unusable | {(row.target_key, row.candidate_hash)}

    def top(
        self, mod: IRModule, target: tvm.target.Target, k: int
    ) -> list[tuple[str, TuningRecord, Evidence]]:
        """The ``k`` best schedules of ``mod`` measured on exactly ``target``, best first (the
        first is :meth:`best`'s at the ``target`` level, the re-timing's verdict applied):
        (candidate hash, its record with the pooled run times, its evidence). Records whose
        trace does not apply are left out."""
        wid = self.workload_id(mod)
        if wid is None or k < 1:
            return []
        values = {"tkey": TargetKey.of(target).key}

        def lookup(session: Session) -> list[tuple[Any, Evidence]]:
            conn, rows = session.connection(), {}
            where = level_filters("target", values)
            bounded = evidence.stream(conn, STREAM_QUERIES["target"], {"wid": wid, **values}, rows)
            found = evidence.ranked(
                bounded, lambda batch: evidence.samples(conn, wid, batch, where), k
            )
            by_target = verdicts.of_workload(conn, wid)
            found = verdicts.prefer(
                found, by_target, lambda s: evidence.pooled(conn, wid, s, where)
            )
            out = []
            for _, ev in found:
                row = (
                    rows.get(ev.first_id)
                    or conn.execute(
                        select(*evidence.ROW_COLUMNS).where(RecordRow.id == ev.first_id)
                    ).one()
                )
                out.append((row, ev))
            return out

        out = []
        for row, ev in self.storage.run(lookup, write=False):
            record = self._usable_record(wid, mod, row, ev)
            if record is not None:
                out.append((row.candidate_hash, record, ev))
        return out

    def _usable_record(
        self, wid: int, mod: IRModule, row: Any, ev: Evidence
    ) -> TuningRecord | None:
        """The record of ``row`` with the pooled run times of ``ev``'s schedule, or None when
        its trace does not apply to ``mod``."""
        key = (wid, row.trace_json)
        if self._unusable.get(key):
            return None
        try:
            record = self._to_record(row, self._workload(wid, mod))
            if key not in self._unusable:
                record.trace.apply_to_schedule(tvm.s_tir.Schedule(mod), remove_postproc=False)
                self._unusable[key] = False
        except Exception as err:  # TVM's InternalError/ValueError for a foreign trace
            return self._skip(key, err)
        return TuningRecord(
            record.trace, record.workload, list(ev.secs), record.target, record.args_info
        )

    def generic_sec(
        self, family_shash: str, bucket: dict[str, int], target: tvm.target.Target
    ) -> float | None:
        """Measured time of the symbolic kernel ``family_shash``'s generic code at ``bucket``'s
        shapes on ``target`` (:class:`~database.models.GenericRun`; None: never measured)."""
        query = select(func.min(GenericRun.mean_sec)).where(
            GenericRun.family_shash == family_shash,
            GenericRun.bucket_json == json.dumps(bucket, sort_keys=True),
            GenericRun.target_key == TargetKey.of(target).key,
        )
        return self.storage.run(lambda s: s.scalar(query), write=False)

    def add_verdict(
        self,
        mod: IRModule,
        target: tvm.target.Target,
        verdict: verdicts.Verdict,
        job_id: int | None = None,
    ) -> None:
        """Store a paired re-timing's verdict on ``mod``'s schedules on ``target``: from now
        on the build picks its winner over the other schedules it compared."""
        wid = self.workload_id(mod, create=True)
        assert wid is not None
        values = verdicts.row_values(wid, TargetKey.of(target).key, verdict, job_id)
        self.storage.run(lambda s: s.execute(VerdictRow.__table__.insert().values(**values)))

    def add_generic_run(
        self,
        family_shash: str,
        bucket: dict[str, int],
        target: tvm.target.Target,
        run_secs: list[float],
        *,
        device: str | None = None,
        job_id: int | None = None,
    ) -> bool:
        """Store a generic-code time (see :meth:`generic_sec`); False when this device already
        has one for the kernel, bucket and target (the first stays)."""
        values = generic_run_values(
            family_shash, bucket, TargetKey.of(target), run_secs, device, job_id
        )
        return self.storage.run(lambda s: insert_generic_run(s, values)) > 0

    def default_schedule_sec(self, mod: IRModule, target: tvm.target.Target) -> float | None:
        """Measured time of ``mod``'s untuned default schedule (an empty trace) on ``target``:
        the mean of the run times of all its records."""
        wid = self.workload_id(mod)
        if wid is None:
            return None
        where = [
            RecordRow.target_key == TargetKey.of(target).key,
            RecordRow.trace_json == EMPTY_TRACE,
        ]
        found = self.storage.run(
            lambda s: evidence.best_of(s.connection(), wid, where), write=False
        )
        return found[1].mean if found is not None else None

    def query_tuning_record(
        self, mod: IRModule, target: tvm.target.Target, workload_name: str | None = None
    ) -> TuningRecord | None:
        """TuneFarm's best (:meth:`best`): target-aware, by the pooled median; stock takes
        ``get_top_k(workload, 1)``, whatever the target (docs/database.md)."""
        found = self.best(mod, target)
        return found[0] if found else None

    def family_workloads(self, family_shash: str) -> list[tuple[dict[str, int], IRModule]]:
        """The bucket-specialized workloads linked to a symbolic kernel when they were tuned:
        (bucket values, module)."""
        query = select(WorkloadRow.bucket_json, WorkloadRow.mod_json).where(
            WorkloadRow.family_shash == family_shash, WorkloadRow.bucket_json.is_not(None)
        )
        rows = self.storage.run(lambda s: list(s.execute(query)), write=False)
        return [(json.loads(b), tvm.ir.load_json(m)) for b, m in rows]

    def bucket_values(self) -> list[dict[str, int]]:
        """Every bucket a workload was tuned at (distinct): the values at which a symbolic
        kernel may have records, to look up by its structure bound to them."""
        query = (
            select(WorkloadRow.bucket_json).where(WorkloadRow.bucket_json.is_not(None)).distinct()
        )
        rows = self.storage.run(lambda s: list(s.scalars(query)), write=False)
        return sorted((json.loads(b) for b in rows), key=lambda b: sorted(b.items()))

    # ---------------------------------------------------------------- measured set
    def measured(self, hashes: list[str], target: tvm.target.Target) -> dict[str, RecordRow]:
        """The stored measurements of candidates on this exact target, by candidate hash (one
        query for a round; hashes never measured are absent): a candidate measured in several
        records is one row holding the run times of all its valid records (its first failed
        record when none is valid)."""
        if not hashes:
            return {}
        tkey = TargetKey.of(target)
        query = select(RecordRow).where(
            RecordRow.candidate_hash.in_(sorted(set(hashes))), RecordRow.target_key == tkey.key
        )
        rows = self.storage.run(
            lambda s: list(s.scalars(query.order_by(RecordRow.id))), write=False
        )
        pooled: dict[str, list[float]] = {}
        out: dict[str, RecordRow] = {}
        for row in rows:
            if row.mean_sec is not None:
                pooled.setdefault(row.candidate_hash, []).extend(json.loads(row.run_secs_json))
            first = out.get(row.candidate_hash)
            if first is None or (first.mean_sec is None and row.mean_sec is not None):
                out[row.candidate_hash] = row
        for cand, secs in pooled.items():
            row = out[cand]
            out[cand] = RecordRow(
                **{c: getattr(row, c) for c in ("id", "workload_id", "candidate_hash", "device")},
                run_secs_json=json.dumps(secs),
                mean_sec=statistics.fmean(secs),
                median_sec=statistics.median(secs),
            )
        return out

    def count_records(self, mod: IRModule, target: tvm.target.Target) -> int:
        """How many candidates of ``mod`` were measured (valid or failed) on ``target``: a
        candidate measured in several records counts once."""
        wid = self.workload_id(mod)
        if wid is None:
            return 0
        tkey = TargetKey.of(target)
        query = select(func.count(distinct(RecordRow.candidate_hash))).where(
            RecordRow.workload_id == wid, RecordRow.target_key == tkey.key
        )
        return int(self.storage.run(lambda s: s.scalar(query), write=False) or 0)

    # ---------------------------------------------------------------- jobs
