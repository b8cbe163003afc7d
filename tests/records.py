"""A test helper: commit one tuning record through the real database, as a job would."""

from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms

from database import TuneFarmDatabase


def commit(db: TuneFarmDatabase, mod: tvm.IRModule, trace: object, secs: list[float]) -> None:
    """Commit a record of ``mod`` scheduled by ``trace`` with run times ``secs`` on ``db``'s
    target."""
    db.commit_tuning_record(
        ms.database.TuningRecord(
            trace,
            db.commit_workload(mod),
            run_secs=secs,
            target=db.target,
            args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"]),
        )
    )
