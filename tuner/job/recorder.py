"""The job's recorder: every measured candidate committed with its provenance (the
:class:`tuner.search.recorder.Recorder` the search records through, and MetaSchedule's
measure callback)."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from typing import Any

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from database import Measurement, TuneFarmDatabase
from tuner.pipeline import Task
from tuner.progress import JobProgress, TaskState
from workers.ledger import Entry, Interrupted, Ledger, RoundPace, TrialBudget
from workers.results import ErrorKind, RunResult

# a round's candidates timed a second time at most (JobRecorder._confirmed)
MAX_CONFIRMATIONS = 3


@derived_object
class JobRecorder(PyMeasureCallback):
    """Commits every measured candidate with its provenance and updates the live view: the
    :class:`tuner.search.recorder.Recorder` of the pipelined search, and MetaSchedule's
    measure callback in its own task loop.

    Candidates the builder dropped past the trial budget are skipped: no record, no trial.
    """

    def __init__(
        self,
        db: TuneFarmDatabase,
        ledger: Ledger,
        tasks: list[Task],
        target: tvm.target.Target,
        job_id: int,
        states: list[TaskState],
        view: JobProgress,
        trials_before: int,
    ) -> None:
        super().__init__()
        self.db, self.ledger, self.tasks, self.target = db, ledger, tasks, target
        self.job_id, self.states, self.view = job_id, states, view
        # the job's count of trials when the search starts: the tasks' records before the
        # job and the defaults it recorded (the progress view and the job row count on from it)
        self.trials_before = trials_before
        self.measured = 0
        self.resumed = 0
        # the scheduler's task ids -> indexes of ``tasks`` (a search over a subset of them)
        self.index: list[int] | None = None
        # set when the job must stop (Ctrl-C, time budget): MetaSchedule's loop is unwound
        # right after the round is recorded, not after another round's search
        self.stop: threading.Event | None = None
        # a timed job's pace and budget: a round is recorded; when the time left holds no
        # other round, the budget closes ("time") and the loop is unwound after this round
        self.pace: RoundPace | None = None
        self.budget: TrialBudget | None = None
        # (key, args as a record stores them) -> the candidate measured once more, or None:
        # a round's fastest candidate, when it beats its task's best, is timed twice
        # (_confirmed); (first mean, second mean) of each such confirmation
        self.confirm: Callable[[str, Any], RunResult | None] | None = None
        self.confirmations: list[tuple[float, float]] = []

    def best_sec(self, task: int) -> float | None:
        """Task ``task``'s best mean latency in this job so far."""
        return self.states[task].best_sec

    def apply(
        self,
        task_scheduler: Any,
        task_id: int,
        measure_candidates: list[Any],
        builder_results: list[Any],
        runner_results: list[Any],
    ) -> None:
        task_id = self.index[task_id] if self.index is not None else task_id
        workload = self.db.commit_workload(self.tasks[task_id].mod)

        def as_json(i: int) -> tuple[Any, Any]:
            cand = measure_candidates[i]
            trace, _, _, args_info = TuningRecord(
                cand.sch.trace, workload, None, self.target, cand.args_info
            ).as_json()
            return trace, args_info

        self.record(task_id, as_json, builder_results, runner_results)
        out_of_time = False
        if self.pace is not None and self.budget is not None and not self.pace.another_round():
            self.budget.close("time")  # another round's search would be lost at the deadline
            out_of_time = True
        if out_of_time or (self.stop is not None and self.stop.is_set()):
            raise Interrupted("the job was stopped")

    def _confirmed(
        self,
        state: TaskState,
        as_json: Callable[[int], tuple[Any, Any]],
        builder_results: list[Any],
        runner_results: list[Any],
    ) -> dict[int, list[float]]:
        """The round's fastest candidate, when it beats the task's best, measured once more:
        {index: the second measurement's run times}, stored as a record of its own (the
        schedule's evidence pools both; the task's live best is their mean). If that
        mean falls behind the round's next fastest, which also beats the best, that one is
        measured again too (at most :data:`MAX_CONFIRMATIONS` a round). Of hundreds of
        candidates timed once, the fastest is also the luckiest timing (on a 2-vCPU VM one
        kernel's runs spread by 30-50%: the best records of 256-trial MLP jobs re-timed at
        1.2-1.5x their record, stock's 64-trial ones at 1.0x): a new best is seldom one run."""
        if self.confirm is None:
            return {}
        runs = {
            i: [float(s) for s in r.run_secs]
            for i, r in enumerate(runner_results)
            if r.error_msg is None and r.run_secs
        }
        confirmed: dict[int, list[float]] = {}
        for _ in range(MAX_CONFIRMATIONS):
            if not runs:
                break
            i = min(runs, key=lambda k: sum(runs[k]) / len(runs[k]))
            first = sum(runs[i]) / len(runs[i])
            if i in confirmed or (state.best_sec is not None and first >= state.best_sec):
                break
            entry = self.ledger.get(builder_results[i].artifact_path)
            again = (
                None
                if entry is None or entry.cached or entry.dropped
                else self.confirm(builder_results[i].artifact_path, as_json(i)[1])
            )
            if again is None or not again.ok or not again.run_secs:
                break
            secs = [float(s) for s in again.run_secs]
            self.confirmations.append((first, sum(secs) / len(secs)))
            confirmed[i] = secs
            runs[i] = runs[i] + secs
        return confirmed

    def confirm_note(self) -> dict[str, Any] | None:
        """How the confirmations went, for ``tune --json``: how many, and the median of
        second / first timing (above 1: the first timings were lucky)."""
        if not self.confirmations:
            return None
        ratios = [b / a for a, b in self.confirmations]
        return {"count": len(ratios), "median_ratio": round(statistics.median(ratios), 3)}

    def record(
        self,
        task_id: int,
        as_json: Callable[[int], tuple[Any, Any]],
        builder_results: list[Any],
        runner_results: list[Any],
    ) -> None:
        """Record one measured round of ``task_id`` (an index of ``tasks``): ``as_json(i)`` is
        candidate i's (trace, arguments) as a record stores them, asked only for the
        candidates that become records."""
        workload = self.db.commit_workload(self.tasks[task_id].mod)
        state = self.states[task_id]
        measured_before = self.measured
        batch: list[Measurement] = []
        confirmed = self._confirmed(state, as_json, builder_results, runner_results)
        for i, (b_res, r_res) in enumerate(zip(builder_results, runner_results, strict=True)):
            entry = self.ledger.pop(b_res.artifact_path)
            if entry is not None and entry.dropped:
                continue
            secs = [float(s) for s in r_res.run_secs] if r_res.run_secs else None
            again = confirmed.get(i) if secs else None
            state.trials += 1
            if r_res.error_msg is None and secs:
                pooled = secs + (again or [])
                mean = sum(pooled) / len(pooled)
                state.best_sec = mean if state.best_sec is None else min(state.best_sec, mean)
            else:
                state.failed += 1
            if entry is None or entry.cached:
                self.resumed += 1
                continue
            self.measured += 1
            trace, args_info = as_json(i)
            error = b_res.error_msg or r_res.error_msg
            batch.append(
                measurement(
                    entry, workload, trace, args_info, self.target, self.job_id, secs, error
                )
            )
            if again and error is None:  # the confirmation: a timed run, a record of its own
                batch.append(
                    measurement(entry, workload, trace, args_info, self.target, self.job_id, again)
                )
        # a resumed hit is one of the records counted in trials_before; the round's records
        # and the job's progress land in one commit
        self.db.add_round(batch, (self.job_id, {"trials_done": self.trials_before + self.measured}))
        self.view.advance(self.measured - measured_before)
        if self.pace is not None:
            self.pace.recorded()


def measurement(
    entry: Entry,
    workload: Any,
    trace: Any,
    args_info: Any,
    target: tvm.target.Target,
    job_id: int | None,
    run_secs: list[float] | None,
    error: str | None = None,
) -> Measurement:
    """The record of a measured candidate: its ledger ``entry`` (hash, where it was built and
    run), its trace and arguments as a record stores them, and its run times or ``error``."""
    kind = ErrorKind.parse(error)
    run, build = entry.run, entry.build
    return Measurement(
        workload=workload,
        candidate_hash=entry.candidate_hash,
        trace_json=trace,
        args_info_json=args_info,
        run_secs=run_secs if kind is None else None,
        target=target,
        error_kind=kind.value if kind else None,
        error_msg=error,
        device=run.device if run else None,
        worker=(run.worker if run else None) or (build.worker if build else None),
        job_id=job_id,
        build_sec=build.build_sec if build else None,
    )
