"""Integrity check: every record's trace must give its own candidate on its own workload.

A record's ``candidate_hash`` is the structural hash of its workload scheduled by its trace, so
replaying the trace tells whether the record sits on the kernel it was measured on. TuneFarm
before 2026-11-23 could put imported or merged records on the wrong workload; ``check`` finds
them, and with ``fix`` moves each one back to the workload whose replay gives its candidate
(or drops it where that workload already holds the same record). A record that matches no
stored workload is quarantined: kept, with its run times, as a failed record of error kind
``misplaced``, so no lookup, search or cost model takes its time for this kernel's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from database.models import RecordRow, WorkloadRow
from database.records import candidate_hash_of_trace, same_record
from database.storage import Storage


@dataclass(frozen=True)
class Misplaced:
    """A record whose trace does not give its candidate on its workload."""

    record_id: int
    workload_id: int
    task_name: str | None
    applies: bool  # the trace applies to its workload (and gives another candidate)
    home: int | None  # the workload whose replay gives the record's candidate, if any

    @property
    def action(self) -> str:
        """What ``fix`` does with it."""
        if self.home is not None:
            return f"move to workload {self.home}"
        return "quarantine (no stored workload matches)"


@dataclass(frozen=True)
class CheckReport:
    """What ``check`` found (and, with ``fix``, did)."""

    records: int
    misplaced: tuple[Misplaced, ...]
    moved: int = 0
    deleted: int = 0  # surplus copies: the right workload already had the candidate
    quarantined: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "misplaced": [
                {
                    "record_id": m.record_id,
                    "workload_id": m.workload_id,
                    "task_name": m.task_name,
                    "action": m.action,
                }
                for m in self.misplaced
            ],
            "moved": self.moved,
            "deleted": self.deleted,
            "quarantined": self.quarantined,
        }


def _replay_hash(trace_json: str, workload: Workload) -> str | None:
    """The candidate hash of a trace replayed on ``workload``; None when it does not apply."""
    try:
        record = TuningRecord.from_json([json.loads(trace_json), None, None, None], workload)
        return candidate_hash_of_trace(record.trace, workload.mod)
    except Exception:  # TVM raises InternalError/ValueError/TypeError for a foreign trace
        return None


def check(
    storage: Storage,
    *,
    fix: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """Replay every record's trace on its workload; with ``fix``, repair what is misplaced.

    Records quarantined by an earlier fix are not checked again.
    ``progress(done, total)`` is called after each record.
    """

    def load(session: Session) -> tuple[list[tuple[int, str, str | None]], list[tuple]]:
        workloads = list(
            session.execute(select(WorkloadRow.id, WorkloadRow.mod_json, WorkloadRow.task_name))
        )
        records = list(
            session.execute(
                select(
                    RecordRow.id,
                    RecordRow.workload_id,
                    RecordRow.candidate_hash,
                    RecordRow.trace_json,
                )
                .where(or_(RecordRow.error_kind.is_(None), RecordRow.error_kind != "misplaced"))
                .order_by(RecordRow.id)
            )
        )
        return [tuple(w) for w in workloads], [tuple(r) for r in records]

    workload_rows, records = storage.run(load, write=False)
    workloads = {wid: Workload(tvm.ir.load_json(mod_json)) for wid, mod_json, _ in workload_rows}
    names = {wid: name for wid, _, name in workload_rows}
    found: list[Misplaced] = []
    for n, (rid, wid, chash, trace_json) in enumerate(records, 1):
        got = _replay_hash(trace_json, workloads[wid])
        if got != chash:
            home = next(
                (
                    other
                    for other, workload in workloads.items()
                    if other != wid and _replay_hash(trace_json, workload) == chash
                ),
                None,
            )
            found.append(Misplaced(rid, wid, names[wid], got is not None, home))
        if progress is not None:
            progress(n, len(records))
    if not fix or not found:
        return CheckReport(records=len(records), misplaced=tuple(found))

    def repair(session: Session) -> tuple[int, int, int]:
        moved = deleted = quarantined = 0
        for m in found:
            row = session.get(RecordRow, m.record_id)
            if row is None:
                continue
            if m.home is None:
                what = "applies but gives another candidate" if m.applies else "does not apply"
                session.execute(
                    update(RecordRow)
                    .where(RecordRow.id == m.record_id)
                    .values(
                        mean_sec=None,
                        std_sec=None,
                        error_kind="misplaced",
                        error_msg=f"its trace {what} on this workload (tunefarm db check)",
                    )
                )
                quarantined += 1
                continue
            keys = ("target_key", "candidate_hash", "trace_json", "args_info_json")
            values = {k: getattr(row, k) for k in (*keys, "run_secs_json")}
            twin = session.scalar(same_record({**values, "workload_id": m.home}))
            if twin is not None:  # the right workload has this record already: surplus
                session.execute(delete(RecordRow).where(RecordRow.id == m.record_id))
                deleted += 1
            else:
                session.execute(
                    update(RecordRow).where(RecordRow.id == m.record_id).values(workload_id=m.home)
                )
                moved += 1
        return moved, deleted, quarantined

    moved, deleted, quarantined = storage.run(repair)
    return CheckReport(len(records), tuple(found), moved, deleted, quarantined)
