"""How sure a best is: the evidence of a schedule, pooled over all its records.

A *schedule* is one candidate (its workload scheduled by its trace, ``candidate_hash``) on one
target. Every timed run of it is a record of its own (a re-measurement, a confirmation,
another job's or a teammate's run), and its evidence pools their valid run times:

- ``runs``: how many timed runs (valid records) were pooled;
- ``samples``: how many run times they hold together;
- ``median``: the median of the pooled run times (seconds);
- ``spread``: the interquartile range of the pooled run times over their median (``None``
  with fewer than two run times);
- ``confirmed``: it was timed in more than one run (``runs >= 2``): one lucky run cannot make
  it the best unseen.

TuneFarm's best schedule of a workload (what ``build`` applies and ``db best`` reports) is the
one with the lowest pooled median; ties go to the schedule with more runs, then to the one
measured first; of the schedules a job's paired re-timing compared, its winner
(:mod:`database.verdicts`). Finding it takes no scan of every record: a schedule's pooled
median is never below the lowest median of its records (``median_sec``, indexed), so
schedules are visited in the order of that lower bound and the visit stops once the bound
passes the best median found.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.engine import Connection

from database import verdicts
from database.models import RecordRow

S = TypeVar("S")
CHUNK = 500  # candidates per IN (...) query
PAGE = 4  # rows of the median-ordered stream read at a time (doubling)


@dataclass(frozen=True)
class Evidence:
    """A schedule's pooled measurements (see the module docstring)."""

    runs: int
    samples: int
    median: float
    mean: float
    spread: float | None
    first_id: int  # the schedule's first record (the tie-breaker of last resort)
    secs: tuple[float, ...] = field(default=(), repr=False, compare=False)  # pooled run times

    @property
    def confirmed(self) -> bool:
        return self.runs >= 2

    @classmethod
    def pool(cls, records: Sequence[tuple[int, Sequence[float]]]) -> Evidence:
        """The evidence of (record id, run times) of one schedule's valid records."""
        secs = [float(s) for _, run in records for s in run]
        if not secs:
            raise ValueError("no run times to pool")
        median = statistics.median(secs)
        spread = None
        if len(secs) >= 2 and median > 0:
            q1, _, q3 = statistics.quantiles(secs, n=4, method="inclusive")
            spread = (q3 - q1) / median
        return cls(
            runs=len(records),
            samples=len(secs),
            median=median,
            mean=statistics.fmean(secs),
            spread=spread,
            first_id=min(rid for rid, _ in records),
            secs=tuple(secs),
        )

    def key(self) -> tuple[float, int, int]:
        """Sort key: lowest median, then more runs, then measured first."""
        return (self.median, -self.runs, self.first_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "samples": self.samples,
            "median": self.median,
            "spread": self.spread,
            "confirmed": self.confirmed,
        }


def evidence_fields(ev: Evidence | None) -> dict[str, Any]:
    """The evidence fields a report shows per kernel (``db best``, ``build``, ``bench
    --kernels``): :meth:`Evidence.to_dict`, or the same keys empty without a tuned record."""
    if ev is None:
        return {"runs": 0, "samples": 0, "median": None, "spread": None, "confirmed": False}
    return ev.to_dict()


@dataclass(frozen=True)
class Bounded(Generic[S]):
    """A schedule with the lower bound of its pooled median (its records' lowest median)."""

    schedule: S
    lower: float
    # its (record id, run times) when known without another query (its only record)
    records: tuple[tuple[int, list[float]], ...] | None = None


def choose(
    schedules: Iterable[Bounded[S]],
    samples_of: Callable[[list[S]], dict[S, list[tuple[int, list[float]]]]],
) -> tuple[S, Evidence] | None:
    """The schedule with the best evidence, of ``schedules`` given in ascending lower bound;
    ``samples_of`` reads some schedules' (record id, run times) at once (:func:`ranked`)."""
    found = ranked(schedules, samples_of, 1)
    return found[0] if found else None


def ranked(
    schedules: Iterable[Bounded[S]],
    samples_of: Callable[[list[S]], dict[S, list[tuple[int, list[float]]]]],
    k: int,
) -> list[tuple[S, Evidence]]:
    """The ``k`` schedules with the best evidence, best first, of ``schedules`` given in
    ascending lower bound. Stops at the first schedule whose bound is above the k-th best
    median found: no later one can enter. Schedules whose bounds tie are read together, in
    one query."""
    top: list[tuple[S, Evidence]] = []

    def bound() -> float:
        return top[-1][1].median if len(top) >= k else math.inf

    it = iter(schedules)
    item = next(it, None)
    while item is not None and item.lower <= bound():
        limit = item.lower if len(top) < k else bound()
        batch = [item]
        item = next(it, None)
        while item is not None and item.lower <= limit:
            batch.append(item)
            item = next(it, None)
        unknown = [b.schedule for b in batch if b.records is None]
        found = samples_of(unknown) if unknown else {}
        for b in batch:
            records = list(b.records) if b.records is not None else found.get(b.schedule)
            if records:
                top.append((b.schedule, Evidence.pool(records)))
        top.sort(key=lambda se: se[1].key())
        del top[k:]
    return top


# ------------------------------------------------------------------ queries
Schedule = tuple[str, str]  # (target key, candidate hash) of one workload


ROW_COLUMNS = (
    RecordRow.id,
    RecordRow.target_key,
    RecordRow.candidate_hash,
    RecordRow.median_sec,
    RecordRow.run_secs_json,
    RecordRow.trace_json,
    RecordRow.target_json,
    RecordRow.args_info_json,
)


def stream_query(where: Sequence[Any]) -> Select[Any]:
    """The statement :func:`stream` runs: a workload's valid records matching ``where`` in
    median order (bound parameters ``wid``, ``offset``, ``size``), each with the count of its
    schedule's valid records (from ``ix_record_schedule``). Built once per level: building a
    statement costs more than running it."""
    same = RecordRow.__table__.alias("same")
    runs = (
        select(func.count())
        .where(
            same.c.workload_id == RecordRow.workload_id,
            same.c.target_key == RecordRow.target_key,
            same.c.candidate_hash == RecordRow.candidate_hash,
            same.c.mean_sec.is_not(None),
        )
        .scalar_subquery()
    )
    return (
        select(*ROW_COLUMNS, runs.label("runs"))
        .where(RecordRow.workload_id == bindparam("wid"), RecordRow.median_sec.is_not(None), *where)
        .order_by(RecordRow.median_sec, RecordRow.id)
        .offset(bindparam("offset"))
        .limit(bindparam("size"))
    )


def stream(
    conn: Connection,
    query: Select[Any],
    params: dict[str, Any],
    rows_out: dict[int, Any] | None = None,
) -> Iterator[Bounded[Schedule]]:
    """The schedules of a workload whose valid records ``query`` (:func:`stream_query`, run
    with ``params``) reads, in ascending lower bound: the records in median order
    (index-served), each schedule at its first record, a page at a time. A schedule with one
    valid record comes with it, so the common case is one query; ``rows_out`` collects the
    rows read, by record id (:data:`ROW_COLUMNS`)."""
    seen: set[Schedule] = set()
    offset, size = 0, PAGE
    while True:
        rows = conn.execute(query, {**params, "offset": offset, "size": size}).all()
        for row in rows:
            key = (row.target_key, row.candidate_hash)
            if rows_out is not None:
                rows_out[row.id] = row
            if key not in seen:
                seen.add(key)
                only = ((row.id, json.loads(row.run_secs_json)),) if row.runs == 1 else None
                yield Bounded(key, float(row.median_sec), only)
        if len(rows) < size:
            return
        offset, size = offset + size, size * 2


def samples(
    conn: Connection, wid: int, schedules: Sequence[Schedule], where: Sequence[Any] = ()
) -> dict[Schedule, list[tuple[int, list[float]]]]:
    """(record id, run times) of some schedules' valid records (``where``: the level's
    filter), by id, per schedule."""
    wanted = set(schedules)
    out: dict[Schedule, list[tuple[int, list[float]]]] = {}
    cands = sorted({cand for _, cand in wanted})
    for start in range(0, len(cands), CHUNK):
        rows = conn.execute(
            select(
                RecordRow.id,
                RecordRow.target_key,
                RecordRow.candidate_hash,
                RecordRow.run_secs_json,
            )
            .where(
                RecordRow.workload_id == wid,
                RecordRow.target_key.in_(sorted({tkey for tkey, _ in wanted})),
                RecordRow.candidate_hash.in_(cands[start : start + CHUNK]),
                RecordRow.mean_sec.is_not(None),
                *where,
            )
            .order_by(RecordRow.id)
        ).all()
        for rid, tkey, cand, secs in rows:
            if (tkey, cand) in wanted:
                out.setdefault((tkey, cand), []).append((rid, json.loads(secs)))
    return out


def best_of(
    conn: Connection, wid: int, where: Sequence[Any] = ()
) -> tuple[Schedule, Evidence] | None:
    """The best schedule of workload ``wid`` among its valid records matching ``where``."""
    bounded = stream(conn, stream_query(where), {"wid": wid})
    found = choose(bounded, lambda batch: samples(conn, wid, batch, where))
    if found is None:
        return None
    by_target = verdicts.of_workload(conn, wid)
    return verdicts.prefer([found], by_target, lambda s: pooled(conn, wid, s, where))[0]


def pooled(
    conn: Connection, wid: int, schedule: Schedule, where: Sequence[Any] = ()
) -> Evidence | None:
    """The evidence of one schedule of workload ``wid`` (None: no valid record matches)."""
    records = samples(conn, wid, [schedule], where).get(schedule)
    return Evidence.pool(records) if records else None


def best_per_partition(
    conn: Connection, *, where: Sequence[Any] = ()
) -> dict[tuple[int, str], tuple[str, Evidence]]:
    """The best schedule (candidate hash, evidence) of every (workload, target) with valid
    records matching ``where``: one grouped query for the bounds, then the samples of the
    few schedules each (workload, target) needs."""
    rows = conn.execute(
        select(
            RecordRow.workload_id,
            RecordRow.target_key,
            RecordRow.candidate_hash,
            func.min(RecordRow.median_sec),
        )
        .where(RecordRow.median_sec.is_not(None), *where)
        .group_by(RecordRow.workload_id, RecordRow.target_key, RecordRow.candidate_hash)
    ).all()
    parts: dict[tuple[int, str], list[Bounded[str]]] = {}
    for wid, tkey, cand, lower in rows:
        parts.setdefault((wid, tkey), []).append(Bounded(cand, float(lower)))
    out: dict[tuple[int, str], tuple[str, Evidence]] = {}
    for (wid, tkey), items in parts.items():
        items.sort(key=lambda b: b.lower)

        def read(cands: list[str], w: int = wid, t: str = tkey) -> dict[str, Any]:
            runs = samples(conn, w, [(t, c) for c in cands], where)
            return {cand: recs for (_, cand), recs in runs.items()}

        found = choose(items, read)
        if found is not None:
            out[(wid, tkey)] = found
    # the re-timing's verdicts (one query for all): of the schedules one compared, its winner
    for (wid, tkey), verdict in verdicts.newest(conn).items():
        if (wid, tkey) not in out:
            continue
        cand, ev = out[(wid, tkey)]
        ranked = verdicts.prefer(
            [((tkey, cand), ev)], {tkey: verdict}, lambda s, w=wid: pooled(conn, w, s, where)
        )
        out[(wid, tkey)] = (ranked[0][0][1], ranked[0][1])
    return out
