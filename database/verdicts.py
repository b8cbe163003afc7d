"""The paired re-timing's verdicts, and how they order a workload's schedules.

A job's end-of-job re-timing (:mod:`tuner.job.retime`) times a task's top schedules
interleaved in one process and names a winner: the incumbent, unless a challenger was faster
with confidence. Pooled medians can still disagree with it (a challenger whose paired rounds
could not tell it from the incumbent may have the lower median), so the verdict is stored and
the build follows it: **of the schedules a verdict compared, its winner ranks first**. A
schedule it did not compare (measured later, or never near the top) still ranks by its
pooled median, and the newest verdict of a workload on a target replaces older ones. A
verdict whose winner has no valid record left (pruned) is passed over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from database.models import VerdictRow

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
    ).order_by(VerdictRow.id)
    if wids is not None:
        query = query.where(VerdictRow.workload_id.in_(sorted(set(wids))))
    return {
        (wid, tkey): Verdict(winner, frozenset(json.loads(compared)), rounds)
        for wid, tkey, winner, compared, rounds in conn.execute(query)
    }


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
