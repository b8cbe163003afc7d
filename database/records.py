"""What a record is, apart from MetaSchedule's interface to it: a :class:`Measurement` (one
measured candidate with its provenance), the identity of a workload (structural hash,
:class:`WorkloadIds`), the row values written per record, and the one prepared query per
lookup level that :class:`~database.ms_database.TuneFarmDatabase` answers ``best`` with.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, NamedTuple

import tvm
import tvm_ffi
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from database.evidence import Evidence
from database.models import GenericRun, RecordRow, WorkloadRow
from database.targets import TargetKey

# Lookup levels, most specific first: the same device (fingerprint) and target, the same
# target, the same target kind and architecture, the same target kind. Never across kinds.
LOOKUP_LEVELS = ("device", "target", "arch", "kind")


class _Found(NamedTuple):
    record: TuningRecord
    level: str
    mean_sec: float


class BestRecord(_Found):
    """What :meth:`TuneFarmDatabase.best` found: ``(record, level, mean_sec)`` (the best
    schedule's record, its trace with the run times of all its records pooled; the lookup
    level that found it, one of ``LOOKUP_LEVELS``; the mean of its pooled run times in
    seconds) and, as an attribute, its ``evidence``."""

    evidence: Evidence

    def __new__(
        cls, record: TuningRecord, level: str, mean_sec: float, evidence: Evidence
    ) -> BestRecord:
        self = super().__new__(cls, record, level, mean_sec)
        self.evidence = evidence
        return self


def shash_of(obj: Any) -> str:
    """Structural hash of a TVM object as 16 hex digits."""
    return format(tvm_ffi.structural_hash(obj) & (2**64 - 1), "016x")


def block_names(mod: IRModule) -> tuple[str, ...]:
    """The names of ``mod``'s blocks, in tree order (a walk of the statements: 6 us for a
    matmul, where building a Schedule to list them takes 250 us)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, tvm.s_tir.SBlock):
            out.append(node.name_hint)
            walk(node.body)
            return
        for attr in ("block", "body", "then_case", "else_case"):
            child = getattr(node, attr, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "seq", None) or ():
            walk(child)

    for func in mod.functions.values():
        walk(getattr(func, "body", None))
    return tuple(out)


def same_workload(a: IRModule, b: IRModule) -> bool:
    """Whether ``a`` and ``b`` are one workload: structurally equal **and** with the same block
    names. Structural equality ignores block names, but a trace finds its blocks by name
    (``GetSBlock``): a kernel of another model with the same structure and other names
    (BERT's ``T_add`` against GPT-2's ``add``) cannot replay its records."""
    return bool(tvm_ffi.structural_equal(a, b)) and block_names(a) == block_names(b)


@dataclass(frozen=True)
class Measurement:
    """One measured (or failed) candidate, with its provenance, ready to store."""

    workload: Workload
    candidate_hash: str
    trace_json: Any
    args_info_json: Any
    run_secs: list[float] | None  # as measured; a failed one's are kept, never used as times
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

    @classmethod
    def from_record(
        cls,
        record: TuningRecord,
        *,
        run_secs: list[float] | None = None,
        error_kind: str | None = None,
        error_msg: str | None = None,
        worker: str | None = None,
    ) -> Measurement:
        """A measurement of a MetaSchedule record: its candidate hash from replaying the trace
        on the workload, ``run_secs`` (default: the record's) unless it failed
        (``error_kind``)."""
        trace, _, _, args_info = record.as_json()
        if run_secs is None and record.run_secs is not None:
            run_secs = [float(s) for s in record.run_secs]
        return cls(
            workload=record.workload,
            candidate_hash=candidate_hash_of_trace(record.trace, record.workload.mod),
            trace_json=trace,
            args_info_json=args_info,
            run_secs=run_secs,
            target=record.target,
            error_kind=error_kind,
            error_msg=error_msg,
            worker=worker,
        )


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
            if same_workload(known, mod):
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

    Workloads are matched by structural equality and block names (:func:`same_workload`), so
    there is no unique constraint to lean on: PostgreSQL serializes creators of one hash with a
    transaction advisory lock, SQLite with its write transactions (BEGIN IMMEDIATE).
    """
    if create and session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": int(shash, 16) - 2**63})
    rows = session.execute(
        select(WorkloadRow.id, WorkloadRow.mod_json).where(WorkloadRow.shash == shash)
    ).all()
    for wid, mod_json in rows:
        if same_workload(tvm.ir.load_json(mod_json), mod):
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


STOCK_FAILED_SEC = 1e10  # stock MetaSchedule's stub for a run with no time


def schedule_instructions(trace_json: Any) -> int:
    """How many instructions of a trace (its JSON form) come before its postprocessing: stock
    MetaSchedule deems a record without any (the untuned default) invalid."""
    insts = trace_json[0] if isinstance(trace_json, list) and trace_json else []
    count = 0
    for inst in insts:
        if isinstance(inst, list) and inst and inst[0] == "EnterPostproc":
            break
        count += 1
    return count


def stock_rank_sec(trace_json: Any, secs: list[float] | None) -> float | None:
    """Stock MetaSchedule's sort key of a record: the mean of its run times as committed
    (1e10 s stubs included); None for a record stock deems invalid (no run time other than
    the stub, or no schedule instruction), which its ``get_top_k`` never returns."""
    if not secs or all(s == STOCK_FAILED_SEC for s in secs):
        return None
    mean = statistics.fmean(secs)
    if not math.isfinite(mean) or not schedule_instructions(trace_json):
        return None
    return mean


def record_values(m: Measurement, wid: int) -> dict[str, Any]:
    """The column values of a measurement's record row."""
    tkey = TargetKey.of(m.target)
    secs = m.run_secs if m.error_kind is None else None
    return {
        "workload_id": wid,
        "candidate_hash": m.candidate_hash,
        "trace_json": json.dumps(m.trace_json),
        "args_info_json": json.dumps(m.args_info_json),
        "run_secs_json": json.dumps(m.run_secs) if m.run_secs is not None else None,
        "mean_sec": statistics.fmean(secs) if secs else None,
        "std_sec": statistics.pstdev(secs) if secs else None,
        "median_sec": statistics.median(secs) if secs else None,
        "rank_sec": stock_rank_sec(m.trace_json, m.run_secs),
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


def level_filters(level: str, values: dict[str, Any]) -> list[Any]:
    """The filter of one lookup level on records of a workload (each served by one index
    with the median last); ``values``: ``tkey``, ``kind``, ``arch``, ``dkey`` (values or
    bound parameters)."""
    if level == "device":
        return [RecordRow.device_key == values["dkey"], RecordRow.target_key == values["tkey"]]
    if level == "target":
        return [RecordRow.target_key == values["tkey"]]
    if level == "arch":
        return [RecordRow.target_kind == values["kind"], RecordRow.target_arch == values["arch"]]
    return [RecordRow.target_kind == values["kind"]]


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


def insert_records() -> Any:
    """An insert of record rows (values given at execution, one dict per row; executed with
    many, one statement per batch) returning the new rows' ids. Every commit is a record: a
    candidate measured again gets a record of its own (its schedule's evidence pools them)."""
    return insert(RecordRow).returning(RecordRow.id)


def insert_record(values: dict[str, Any]) -> Any:
    """:func:`insert_records` of one row: its id."""
    return insert_records().values(**values)


def same_record(values: dict[str, Any]) -> Any:
    """A query for a stored record identical to ``values``: the same workload, target,
    candidate, trace, run times and arguments (how import and merge stay idempotent)."""
    secs = values["run_secs_json"]
    return (
        select(RecordRow.id)
        .where(
            RecordRow.workload_id == values["workload_id"],
            RecordRow.target_key == values["target_key"],
            RecordRow.candidate_hash == values["candidate_hash"],
            RecordRow.trace_json == values["trace_json"],
            RecordRow.args_info_json == values["args_info_json"],
            RecordRow.run_secs_json.is_(None) if secs is None else RecordRow.run_secs_json == secs,
        )
        .limit(1)
    )


def generic_run_values(
    family_shash: str,
    bucket: dict[str, int],
    target: TargetKey,
    run_secs: list[float],
    device: str | None = None,
    job_id: int | None = None,
) -> dict[str, Any]:
    """The column values of a :class:`~database.models.GenericRun`: the time of the symbolic
    kernel ``family_shash``'s generic code at ``bucket``'s shapes on ``target``."""
    if not run_secs or any(not math.isfinite(t) or t <= 0 for t in run_secs):
        raise ValueError(f"a generic run needs positive finite run times: {run_secs}")
    return {
        "family_shash": family_shash,
        "bucket_json": json.dumps(bucket, sort_keys=True),
        "target_key": target.key,
        "target_kind": target.kind,
        "target_arch": target.arch,
        "device": device,
        "device_key": device_key(device),
        "run_secs_json": json.dumps(run_secs),
        "mean_sec": sum(run_secs) / len(run_secs),
        "job_id": job_id,
    }


def insert_generic_run(session: Session, values: dict[str, Any]) -> int:
    """Add a :class:`~database.models.GenericRun` row unless one of the same kernel, bucket,
    target and device is stored (a NULL device included, which a unique constraint would let
    through); 1 when added, else 0."""
    device = values.get("device_key")
    same = select(GenericRun.id).where(
        GenericRun.family_shash == values["family_shash"],
        GenericRun.bucket_json == values["bucket_json"],
        GenericRun.target_key == values["target_key"],
        GenericRun.device_key.is_(None) if device is None else GenericRun.device_key == device,
    )
    if session.execute(same.limit(1)).first() is not None:
        return 0
    session.add(GenericRun(**values))
    session.flush()
    return 1
