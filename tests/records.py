"""A test helper: commit one tuning record through the real database, as a job would."""

from __future__ import annotations

import dataclasses

import tvm
from tvm.s_tir import meta_schedule as ms

from database import Measurement, TuneFarmDatabase


def commit(
    db: TuneFarmDatabase,
    mod: tvm.IRModule,
    trace: object,
    secs: list[float],
    device: str | None = None,
) -> None:
    """Commit a record of ``mod`` scheduled by ``trace`` with run times ``secs`` on ``db``'s
    target (measured on ``device``, a fingerprint, when given: a job's runners record theirs)."""
    record = ms.database.TuningRecord(
        trace,
        db.commit_workload(mod),
        run_secs=secs,
        target=db.target,
        args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"]),
    )
    if device is None:
        db.commit_tuning_record(record)
    else:
        db.add(dataclasses.replace(Measurement.from_record(record), device=device))
