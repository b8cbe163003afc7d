"""SQLAlchemy models of the schedule database.

Everything stored is data: TVM objects are kept in TVM's JSON form and parsed back with TVM's
JSON loaders, never unpickled.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

EMPTY_TRACE = "[[], []]"  # json.dumps([[], []]): the untuned default schedule, as tune records it


def utcnow() -> dt.datetime:
    """Timezone-aware now, stored as UTC."""
    return dt.datetime.now(dt.timezone.utc)


def naive_utc(when: dt.datetime) -> dt.datetime:
    """A UTC time without its zone (SQLite returns stored times naive, in UTC)."""
    return (
        when.replace(tzinfo=None)
        if when.tzinfo is None
        else when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    )


class Base(DeclarativeBase):
    """Declarative base of all TuneFarm tables."""


class MetaRow(Base):
    """Key/value facts about the database itself (schema version, creator)."""

    __tablename__ = "tunefarm_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class WorkloadRow(Base):
    """A tensor program (one PrimFunc in an IRModule) that schedules are tuned for."""

    __tablename__ = "workloads"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    shash: Mapped[str] = mapped_column(String(32), index=True)
    mod_json: Mapped[str] = mapped_column(Text)
    task_name: Mapped[str | None] = mapped_column(String(256))
    # The symbolic PrimFunc this static workload was specialized from, and the bucket values.
    family_shash: Mapped[str | None] = mapped_column(String(32), index=True)
    bucket_json: Mapped[str | None] = mapped_column(Text)
    flops: Mapped[float | None] = mapped_column(Float)
    tvm_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    records: Mapped[list[RecordRow]] = relationship(back_populates="workload")


class JobRow(Base):
    """One tuning job: who ran it, on what, with which budget, and how far it got."""

    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256), index=True)
    status: Mapped[str] = mapped_column(String(32), default="running")
    model: Mapped[str | None] = mapped_column(Text)
    target_json: Mapped[str] = mapped_column(Text)
    budget: Mapped[int] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    submitted_by: Mapped[str | None] = mapped_column(String(128))
    config_json: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)


class JobTaskRow(Base):
    """How one of a finished job's tasks ended: its weight in the model (calls per run), the
    trials it had, its best and untuned latencies, and whether its search converged."""

    __tablename__ = "job_tasks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    workload_id: Mapped[int | None] = mapped_column(
        ForeignKey("workloads.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str] = mapped_column(String(256))
    weight: Mapped[int] = mapped_column(Integer)
    trials: Mapped[int] = mapped_column(Integer)
    best_sec: Mapped[float | None] = mapped_column(Float)
    baseline_sec: Mapped[float | None] = mapped_column(Float)
    expected_gain: Mapped[float | None] = mapped_column(Float)
    converged: Mapped[bool] = mapped_column(Boolean, default=False)
    converged_at: Mapped[int | None] = mapped_column(Integer)


class VerdictRow(Base):
    """The paired re-timing's verdict on a workload's schedules on one target: of the
    ``compared`` schedules (candidate hashes, JSON), ``winner`` is the build's pick until
    another re-timing compares them again (:mod:`database.verdicts`)."""

    __tablename__ = "verdicts"
    __table_args__ = (Index("ix_verdict_workload", "workload_id", "target_key", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    target_key: Mapped[str] = mapped_column(String(40))
    winner: Mapped[str] = mapped_column(String(32))
    compared_json: Mapped[str] = mapped_column(Text)
    rounds: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RecordRow(Base):
    """One timed run of a candidate schedule of a workload on a target (valid or failed).

    Every commit is a record, as in stock MetaSchedule: a schedule (workload, target,
    candidate hash) measured again (a confirmation, another job, a teammate's merge) has one
    record per timed run, and its evidence pools them (:mod:`database.evidence`).
    """

    __tablename__ = "tuning_records"
    __table_args__ = (
        Index("ix_record_schedule", "workload_id", "target_key", "candidate_hash"),
        Index("ix_record_best", "workload_id", "target_key", "median_sec"),
        Index("ix_record_top_k", "workload_id", "target_key", "rank_sec"),
        Index("ix_record_candidate", "candidate_hash", "target_key"),
        Index("ix_record_device", "workload_id", "device_key", "median_sec"),
        Index("ix_record_arch", "workload_id", "target_kind", "target_arch", "median_sec"),
        # the dashboard's reads: a job's kernels and bests, and the devices with records
        Index("ix_record_job", "job_id", "workload_id", "mean_sec"),
        Index("ix_record_target_device", "target_key", "device_key", "workload_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    candidate_hash: Mapped[str] = mapped_column(String(32))
    trace_json: Mapped[str] = mapped_column(Text)
    args_info_json: Mapped[str] = mapped_column(Text)
    run_secs_json: Mapped[str | None] = mapped_column(Text)
    mean_sec: Mapped[float | None] = mapped_column(Float)  # None: failed (never chosen)
    std_sec: Mapped[float | None] = mapped_column(Float)
    # the median of this record's run times (None when failed): the lower bound of its
    # schedule's pooled median, so the best schedule is found from an index
    median_sec: Mapped[float | None] = mapped_column(Float)
    # stock MetaSchedule's sort key: the mean of the run times as committed (1e10 s stubs
    # included), None where stock deems the record invalid; orders ``get_top_k``
    rank_sec: Mapped[float | None] = mapped_column(Float)
    target_key: Mapped[str] = mapped_column(String(40))
    target_json: Mapped[str] = mapped_column(Text)
    target_kind: Mapped[str] = mapped_column(String(32), index=True)
    target_arch: Mapped[str | None] = mapped_column(String(64))
    device: Mapped[str | None] = mapped_column(Text)
    # sha1 of ``device`` (the fingerprint), for the exact-device lookup level.
    device_key: Mapped[str | None] = mapped_column(String(40))
    worker: Mapped[str | None] = mapped_column(String(256))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_msg: Mapped[str | None] = mapped_column(Text)
    build_sec: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    workload: Mapped[WorkloadRow] = relationship(back_populates="records")


class CostModelSnapshot(Base):
    """A trained cost model for one target kind and architecture, shared by every job.

    ``model_blob`` is XGBoost's own UBJSON model (never a pickle); ``trained_on`` names the
    records it was trained on (id range, count, hash), ``metrics_json`` how good it was.
    """

    __tablename__ = "cost_model_snapshots"
    __table_args__ = (Index("ix_snapshot_target", "target_kind", "target_arch", "created_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    target_kind: Mapped[str] = mapped_column(String(32))
    target_arch: Mapped[str | None] = mapped_column(String(64))
    format_version: Mapped[int] = mapped_column(Integer)
    tvm_version: Mapped[str] = mapped_column(String(64))
    xgboost_version: Mapped[str] = mapped_column(String(64))
    feature_version: Mapped[int] = mapped_column(Integer)
    n_records: Mapped[int] = mapped_column(Integer)
    trained_on: Mapped[str] = mapped_column(Text)
    metrics_json: Mapped[str | None] = mapped_column(Text)
    model_blob: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str | None] = mapped_column(String(128))


class RecordFeatures(Base):
    """A record's cost-model features, computed once (replaying its trace is slow).

    Raw little-endian float32 bytes, never pickles: ``pooled`` is one row of the ranker's
    features, ``per_store`` a ``[per_store_rows, per_store_cols]`` matrix (stock XGBModel's
    input). A row of another ``feature_version`` or ``workload_id`` than its record's is stale.
    """

    __tablename__ = "record_features"
    record_id: Mapped[int] = mapped_column(
        ForeignKey("tuning_records.id", ondelete="CASCADE"), primary_key=True
    )
    workload_id: Mapped[int] = mapped_column(Integer)
    feature_version: Mapped[int] = mapped_column(Integer)
    pooled: Mapped[bytes] = mapped_column(LargeBinary)
    per_store: Mapped[bytes] = mapped_column(LargeBinary)
    per_store_rows: Mapped[int] = mapped_column(Integer)
    per_store_cols: Mapped[int] = mapped_column(Integer)


class GenericRun(Base):
    """The measured time of a symbolic kernel's generic code (its untuned default schedule,
    symbolic extents) run at one bucket's shapes, on a target.

    The build weighs it against the bucket kernels: a static kernel with constant extents,
    even untuned, can run 10x faster than the same code with symbolic extents (BERT's
    attention matmuls at s=16). Keyed by the kernel's structural hash (``family_shash``, as
    workloads' ``family_shash``): block names do not change the code, so kernels of one
    structure share a time. No workload row: nothing replays on it.

    A bucket's range kernel (its best schedule transplanted onto the padded symbolic kernel,
    ``tuner.symbolic.probes``) is timed the same way and stored under its own hash: the
    build prices it by that time, not its static kernel's.
    """

    __tablename__ = "generic_runs"
    __table_args__ = (
        UniqueConstraint(
            "family_shash", "bucket_json", "target_key", "device_key", name="uq_generic_run"
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family_shash: Mapped[str] = mapped_column(String(32))
    bucket_json: Mapped[str] = mapped_column(Text)
    target_key: Mapped[str] = mapped_column(String(40))
    target_kind: Mapped[str] = mapped_column(String(32))
    target_arch: Mapped[str | None] = mapped_column(String(64))
    device: Mapped[str | None] = mapped_column(Text)
    device_key: Mapped[str | None] = mapped_column(String(40))
    run_secs_json: Mapped[str] = mapped_column(Text)
    mean_sec: Mapped[float] = mapped_column(Float)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
