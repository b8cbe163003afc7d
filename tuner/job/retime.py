"""The end-of-job re-timing: each task's top few schedules timed again, paired.

Of hundreds of candidates timed once, the fastest record is also the luckiest timing: a job's
recorded bests ran slower re-timed in a fresh process. At the end of a job each task's ``top``
schedules by pooled median (:meth:`database.TuneFarmDatabase.top`) are built once more and
timed interleaved on the runner, ``A B C A B C ...`` for ``rounds`` rounds, one after the
other on the job's device actor. Every timed run is recorded as a record of its schedule, so
the build's pick (the pooled median, :mod:`database.evidence`) reflects them.

The challenger rule (:func:`winner`): the incumbent (the best before the re-timing) keeps its
place unless a challenger is faster with confidence over the paired rounds
(:func:`tuner.paired.faster_with_confidence`); a challenger that only ties is not promoted.
Pairs are rounds in which every candidate ran on the same worker. The verdict is stored
(:mod:`database.verdicts`) and the build follows it: of the schedules compared, the winner is
the pick, whatever their pooled medians say.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import tvm

from database import Measurement, TuneFarmDatabase
from database.verdicts import Verdict
from tuner.paired import faster_with_confidence, interval, log_ratios
from tuner.pipeline import Task
from workers.builder import RayBuilder
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.job")
# re-timings of one task at most: when the build's pick after one is a schedule it did not
# time (the re-timed ones' lucky first timings gone, the next one's is the lowest), the new
# top few are re-timed once more
PASSES = 2


@dataclass(frozen=True)
class Retimed:
    """One task's re-timing: its candidates (incumbent first) and the outcome."""

    task: str
    candidates: tuple[str, ...]  # candidate hashes, the incumbent first
    rounds: int  # paired rounds (every candidate timed, on one worker)
    winner: int  # index into ``candidates``: 0 when the incumbent kept its place
    ratios: tuple[float | None, ...]  # each challenger's paired ratio to the incumbent
    pick: str | None = None  # the build's pick (the lowest pooled median) after it

    @property
    def agrees(self) -> bool:
        """Whether the build's pick is the rule's winner."""
        return self.pick == self.candidates[self.winner]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "candidates": len(self.candidates),
            "rounds": self.rounds,
            "promoted": self.winner != 0,
            "ratios": [None if r is None else round(r, 4) for r in self.ratios],
            "build_pick_is_winner": self.agrees,
        }


def winner(rounds: Sequence[Sequence[float]]) -> tuple[int, list[float | None]]:
    """The challenger rule over paired rounds: ``rounds[i][c]`` is candidate ``c``'s time in
    round ``i``, candidate 0 the incumbent. Returns the winner's index (0 unless a challenger
    is faster with confidence; of several, the one of lowest paired ratio) and each
    challenger's paired ratio to the incumbent (geometric mean; None without rounds)."""
    n = len(rounds[0]) if rounds else 0
    ratios: list[float | None] = []
    best, best_ratio = 0, 1.0
    for c in range(1, n):
        mine = [r[c] for r in rounds]
        theirs = [r[0] for r in rounds]
        ratio = interval(log_ratios(list(zip(mine, theirs, strict=True))), resamples=1).ratio
        ratios.append(ratio)
        if faster_with_confidence(mine, theirs) and ratio < best_ratio:
            best, best_ratio = c, ratio
    return best, ratios


@dataclass(frozen=True)
class Retiming:
    """A job's re-timing: each pass (a task may have several) and whether the time budget's
    deadline stopped it before a pass (the tasks not reached keep the pooled median's pick)."""

    passes: list[Retimed]
    cut_by_time: bool = False


def retime(
    tasks: Sequence[Task],
    target: tvm.target.Target,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase,
    job_id: int | None,
    top: int,
    rounds: int,
    deadline: float | None = None,
) -> Retiming:
    """Re-time each task's ``top`` schedules paired for ``rounds`` rounds and record every
    timed run; tasks with fewer than two schedules are left alone. ``deadline`` (a
    :func:`time.perf_counter` time, the job's time budget): no task's pass starts after it."""
    out = []
    for task in tasks:
        compared: set[str] = set()
        for _ in range(PASSES):
            if deadline is not None and time.perf_counter() >= deadline:
                log.info("re-timing stopped at the time budget after %d passes", len(out))
                return Retiming(out, cut_by_time=True)
            found = db.top(task.mod, target, top)
            if len(found) < 2 or found[0][0] in compared:
                break  # the build's pick was re-timed
            done = _retime_task(task, found, target, builder, runner, db, job_id, rounds)
            if done is None:
                break
            if done.rounds:
                # the verdict stands over every schedule this job's passes compared (a
                # challenger an earlier pass could not tell from its winner stays behind it)
                compared.update(done.candidates)
                verdict = Verdict(done.candidates[done.winner], frozenset(compared), done.rounds)
                db.add_verdict(task.mod, target, verdict, job_id)
            pick = db.top(task.mod, target, 1)
            out.append(replace(done, pick=pick[0][0] if pick else None))
            if not done.rounds:
                break
    return Retiming(out)


def _retime_task(
    task: Task,
    found: list[tuple[str, Any, Any]],
    target: tvm.target.Target,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase,
    job_id: int | None,
    rounds: int,
) -> Retimed | None:
    workload = db.commit_workload(task.mod)
    cands = []
    for cand_hash, record, _ in found:
        sch = tvm.s_tir.Schedule(task.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        trace, _, _, args_info = record.as_json()
        cands.append((cand_hash, tvm.ir.save_json(sch.mod), trace, args_info))
    budget, builder.budget = builder.budget, None  # not trials
    try:
        built = builder.build_json([(h, mod) for h, mod, _, _ in cands], target, cached=False)
    finally:
        builder.budget = budget
    keys = [b.artifact_path for b in built]
    try:
        if any(b.error_msg is not None for b in built):
            log.info("%s: a candidate did not rebuild; not re-timed", task.name)
            return None
        paired: list[list[float]] = []
        batch: list[Measurement] = []
        for _ in range(rounds):
            times, workers = [], set()
            for key, (cand_hash, _, trace, args_info) in zip(keys, cands, strict=True):
                run = runner.remeasure(key, json.loads(json.dumps(args_info, default=float)))
                if run is None or not run.ok or not run.run_secs:
                    continue
                secs = [float(s) for s in run.run_secs]
                batch.append(
                    Measurement(
                        workload=workload,
                        candidate_hash=cand_hash,
                        trace_json=trace,
                        args_info_json=args_info,
                        run_secs=secs,
                        target=target,
                        device=run.device,
                        worker=run.worker,
                        job_id=job_id,
                    )
                )
                times.append(statistics.median(secs))
                workers.add(run.worker)
            if len(times) == len(cands) and len(workers) == 1:
                paired.append(times)
        db.add_round(batch)
    finally:
        for key in keys:
            builder.ledger.pop(key)
    won, ratios = winner(paired) if paired else (0, [None] * (len(cands) - 1))
    return Retimed(task.name, tuple(h for h, *_ in cands), len(paired), won, tuple(ratios))
