"""The paired re-timing's verdicts, and how they order a workload's schedules.

A job's end-of-job re-timing (:mod:`tuner.job.retime`) times a task's top schedules
interleaved in one process and names a winner: the incumbent, unless a challenger was faster
with confidence. Pooled medians can still disagree with it (a challenger whose paired rounds
could not tell it from the incumbent may have the lower median), so the verdict is stored and
the build follows it: **of the schedules a verdict compared, its winner ranks first**. A
schedule it did not compare (measured later, or never near the top) still ranks by its
pooled median, and the newest verdict of a workload on a target replaces older ones (by the
time it was taken, so a teammate's older verdict merged in later does not displace a newer
one). A verdict whose winner has no valid record left (pruned) is passed over. Verdicts travel
with their records: ``db merge``, ``db export`` and ``db import`` copy them (:func:`rows`,
:func:`insert_copy`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from database.models import VerdictRow, naive_utc

if TYPE_CHECKING:  # evidence imports this module
    from database.evidence import Evidence, Schedule


@dataclass(frozen=True)
class Verdict:
    """The winner of the schedules (candidate hashes) a re-timing compared."""

    winner: str
    compared: frozenset[str]
    rounds: int

    def __post_init__(self) -> None:
        if self.winner not in self.compared:
            raise ValueError("a verdict's winner is one of the schedules it compared")


def row_values(wid: int, target_key: str, verdict: Verdict, job_id: int | None) -> dict[str, Any]:
    """The ``verdicts`` row of ``verdict`` on workload ``wid`` and ``target_key``."""
    return {
        "workload_id": wid,
        "target_key": target_key,
        "winner": verdict.winner,
        "compared_json": json.dumps(sorted(verdict.compared)),
        "rounds": verdict.rounds,
        "job_id": job_id,
    }


def newest(conn: Connection, wids: Iterable[int] | None = None) -> dict[tuple[int, str], Verdict]:
    """The newest verdict per (workload id, target key), of ``wids`` (default: every
    workload)."""
    query = select(
        VerdictRow.workload_id,
        VerdictRow.target_key,
        VerdictRow.winner,
        VerdictRow.compared_json,
        VerdictRow.rounds,
    ).order_by(VerdictRow.created_at, VerdictRow.id)
    if wids is not None:
        query = query.where(VerdictRow.workload_id.in_(sorted(set(wids))))
    return {
        (wid, tkey): Verdict(winner, frozenset(json.loads(compared)), rounds)
        for wid, tkey, winner, compared, rounds in conn.execute(query)
    }


def rows(session: Session, wids: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """Every verdict row (of ``wids``; default: all) as column values without its id and job
    (a copy names no job of its source), oldest first."""
    query = select(VerdictRow).order_by(VerdictRow.created_at, VerdictRow.id)
    if wids is not None:
        query = query.where(VerdictRow.workload_id.in_(sorted(set(wids))))
    keys = ("workload_id", "target_key", "winner", "compared_json", "rounds", "created_at")
    out = [{k: getattr(row, k) for k in keys} for row in session.scalars(query)]
    for values in out:  # one zone whatever the database returned: UTC
        values["created_at"] = naive_utc(values["created_at"]).replace(tzinfo=dt.timezone.utc)
    return out


def insert_copy(session: Session, values: Mapping[str, Any]) -> int:
    """Add a copied verdict row (:func:`rows`' values, ``workload_id`` already this
    database's) unless the same verdict is stored; 1 when added, else 0."""
    when = values["created_at"]
    same = select(VerdictRow.id).where(
        VerdictRow.workload_id == values["workload_id"],
        VerdictRow.target_key == values["target_key"],
        VerdictRow.winner == values["winner"],
        VerdictRow.compared_json == values["compared_json"],
        VerdictRow.rounds == values["rounds"],
    )
    stored = session.execute(same.add_columns(VerdictRow.created_at)).all()
    if any(naive_utc(at) == naive_utc(when) for _, at in stored):
        return 0
    session.execute(VerdictRow.__table__.insert().values(**values, job_id=None))
    return 1


def line(values: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The line of an export's verdict file for a :func:`rows` entry whose workload is line
    ``index`` of the export's workload file."""
    return {
        "index": index,
        "target_key": values["target_key"],
        "winner": values["winner"],
        "compared": json.loads(values["compared_json"]),
        "rounds": values["rounds"],
        "created_at": values["created_at"].isoformat(),
    }


def from_line(entry: Any) -> tuple[int, dict[str, Any]] | None:
    """The workload line and :func:`rows`-style values (no ``workload_id``) of a verdict
    file's entry; None when it is not one."""
    if not isinstance(entry, dict):
        return None
    index, compared, rounds = entry.get("index"), entry.get("compared"), entry.get("rounds")
    strings = ("target_key", "winner", "created_at")
    if not (
        type(index) is int
        and index >= 0
        and type(rounds) is int
        and rounds >= 0
        and all(isinstance(entry.get(k), str) and entry[k] for k in strings)
        and isinstance(compared, list)
        and all(isinstance(c, str) for c in compared)
        and entry["winner"] in compared
        and len(entry["target_key"]) <= 40
        and all(len(c) <= 32 for c in compared)
    ):
        return None
    try:
        when = dt.datetime.fromisoformat(entry["created_at"])
    except ValueError:
        return None
    when = naive_utc(when).replace(tzinfo=dt.timezone.utc)
    values = {
        "target_key": entry["target_key"],
        "winner": entry["winner"],
        "compared_json": json.dumps(sorted(set(compared))),
        "rounds": rounds,
        "created_at": when,
    }
    return index, values


def of_workload(conn: Connection, wid: int) -> dict[str, Verdict]:
    """The newest verdict on workload ``wid`` per target key."""
    return {tkey: v for (_, tkey), v in newest(conn, [wid]).items()}


def prefer(
    ranked: list[tuple[Schedule, Evidence]],
    verdicts: Mapping[str, Verdict],
    evidence_of: Callable[[Schedule], Evidence | None],
) -> list[tuple[Schedule, Evidence]]:
    """``ranked`` (schedules best first by pooled median, the top ``len(ranked)``) with the
    verdict of the first one's target (``verdicts`` by target key) applied: when the first is
    a schedule the verdict compared but not its winner, the winner moves to the front
    (``evidence_of`` reads its evidence when it is not in ``ranked``; None: passed over)."""
    if not ranked:
        return ranked
    (tkey, cand), _ = ranked[0]
    verdict = verdicts.get(tkey)
    if verdict is None or cand == verdict.winner or cand not in verdict.compared:
        return ranked
    win = (tkey, verdict.winner)
    for i, (schedule, _) in enumerate(ranked):
        if schedule == win:
            return [ranked[i], *ranked[:i], *ranked[i + 1 :]]
    ev = evidence_of(win)
    if ev is None:
        return ranked
    return [(win, ev), *ranked[:-1]]  # the winner was below the k read: the k-th goes
