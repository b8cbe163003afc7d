"""A tuning job: extract tasks, search with MetaSchedule on Ray workers, record into SQL.

:func:`tune` runs the job's phases in order, each a method of :class:`_Job`: the job row
(config), the tasks (:mod:`tuner.job.tasks`), the workers and the search's start, the untuned
baselines (:mod:`tuner.job.baselines`), the search (:mod:`tuner.job.modes`), the dispatch
rule's probes (:mod:`tuner.job.probes`) and the summaries (:mod:`tuner.job.summary`).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import tvm

from database import Storage, TuneFarmDatabase
from database.jobs import record_job_tasks, start_job, update_job
from database.models import utcnow
from tuner.errors import JobInterrupted, TuneFarmError
from tuner.interrupt import deadline, stop_on_sigint
from tuner.job.baselines import measure_baselines
from tuner.job.config import WARM_BUILDERS, TuneConfig, measure_for
from tuner.job.modes import (
    run_actor_search,
    search_in_driver,
    shares_host_cpu,
    start_actor_search,
)
from tuner.job.probes import measure_probes, range_probes
from tuner.job.recorder import JobRecorder
from tuner.job.retime import retime as retime_tasks
from tuner.job.summary import JobSummary, TaskSummary, device_busy
from tuner.job.tasks import JobTasks, job_tasks, thin_budget_warning
from tuner.progress import JobProgress, SilentProgress, TaskState
from tuner.search.driver import ActorSearch
from tuner.search.scheduler import TaskProgress
from tuner.startup import SearchPrep
from tuner.targets import device_kind
from workers.builder import RayBuilder
from workers.connection import RayConnection
from workers.ledger import Interrupted, Ledger, RoundPace, TrialBudget
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.job")


def tune(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    storage: Storage,
    config: TuneConfig,
    *,
    address: str | None = None,
    model_name: str | None = None,
    progress: JobProgress | None = None,
    buckets: dict[str, list[int]] | None = None,
) -> JobSummary:
    """Tune the tasks of ``mod`` for ``target`` into ``storage``; resumable.

    A model with symbolic dims is tuned at every combination of ``buckets`` (see
    :mod:`tuner.symbolic.buckets`): one static task per distinct kernel, its bucket recorded
    with it. ``progress`` hears how the search goes (see :class:`tuner.progress.JobProgress`).
    The job's trials are the records its tasks have, counted against ``config.trials``: the
    progress view, the job row's ``trials_done`` and the summary agree.
    """
    start = time.perf_counter()
    db = TuneFarmDatabase(storage, target, seeds=16 if config.transfer else 0)
    db_busy_at_start = storage.busy_sec
    found = job_tasks(mod, target, db, buckets)
    job: _Job | None = None
    asked = False

    def ask_stop() -> None:
        nonlocal asked
        asked = True
        if job is not None:
            job.ask_stop()

    # the first Ctrl-C from here on stops the job where it is and records it interrupted:
    # the handler is in place before the job's row exists (a Ctrl-C between the two was
    # Python's KeyboardInterrupt, or nothing where the shell ignored SIGINT: the job ran on)
    with stop_on_sigint(ask_stop):
        job = _Job.open(found, db, target, config, model_name, start, db_busy_at_start)
        if asked:
            job.ask_stop()
        try:
            with RayConnection(address):
                job.start_workers()
                try:
                    job.measure_baselines()
                    job.search(progress or SilentProgress())
                    job.retime()
                    job.measure_probes()
                finally:
                    job.shutdown()
            if job.stop_asked:  # stopped where nothing raised (e.g. before any build)
                raise Interrupted("the job was interrupted")
        except BaseException as err:
            job.end_badly(err)
            raise
        finally:
            if job.prep is not None:  # its thread ends with the job, whatever ended the job
                job.prep.close()
    return job.summarize()


@dataclass
class _Job:
    """One job's state as its phases hand it on."""

    config: TuneConfig
    target: tvm.target.Target
    db: TuneFarmDatabase
    found: JobTasks
    job_id: int
    job_name: str
    trials_before: int  # the tasks' records when the job started
    start: float
    db_busy_at_start: float
    states: list[TaskState]
    prep: SearchPrep | None
    ledger: Ledger = field(default_factory=Ledger)
    budget: TrialBudget | None = None
    builder: RayBuilder | None = None
    runner: RayRunner | None = None
    search_actors: ActorSearch | None = None
    cost_model: Any = None
    recorder: JobRecorder | None = None
    defaults_recorded: int = 0
    baselines: list[float | None] = field(default_factory=list)
    search_info: dict[str, Any] = field(default_factory=lambda: {"mode": "driver"})
    stop_asked: bool = False
    startup_sec: float = 0.0
    window_start: float = 0.0
    probe_time: _DriverTime | None = None
    phases: dict[str, float] = field(default_factory=dict)
    devices: dict[str, Any] = field(default_factory=dict)
    # the end-of-job re-timing: its wall time, and its builder, runner and database waits
    # (counted in the retime phase, not in build_wait, run_wait and database)
    retime_sec: float = 0.0
    retime_waits: tuple[float, float, float] = (0.0, 0.0, 0.0)

    # ------------------------------------------------------------------ config
    @classmethod
    def open(
        cls,
        found: JobTasks,
        db: TuneFarmDatabase,
        target: tvm.target.Target,
        config: TuneConfig,
        model_name: str | None,
        start: float,
        db_busy_at_start: float,
    ) -> _Job:
        """The job's row (status running), with the trials its tasks had before it."""
        tasks = found.tasks
        trials_before = found.recorded(db, target)
        warning = thin_budget_warning(found, config.trials - trials_before)
        if warning is not None:
            log.warning(warning)
        job_name = config.job_name or f"{model_name or 'model'}-{time.strftime('%Y%m%d-%H%M%S')}"
        job_id = start_job(
            db.storage,
            name=job_name,
            model=model_name,
            target_json=json.dumps(target.export(), default=list),
            budget=config.trials,
            trials_done=trials_before,
            submitted_by=_user(),
            config_json=json.dumps(_config_row(config)),
        )
        # the search's intrinsics and cost model, made while Ray starts (nothing to make
        # without a budget)
        prep = None
        if config.trials > trials_before:
            prep = SearchPrep(
                target,
                db.storage,
                [t.mod for t in tasks],
                config.cost_model,
                config.seed,
                config.warm_start,
            )
        states = [TaskState(name=t.name, flops=t.flops) for t in tasks]
        return cls(
            config, target, db, found, job_id, job_name, trials_before, start,
            db_busy_at_start, states, prep,
        )  # fmt: skip

    @property
    def trials_done(self) -> int:
        """The job's count: the records before it, and those it made (defaults, searched)."""
        measured = self.recorder.measured if self.recorder is not None else 0
        return self.trials_before + self.defaults_recorded + measured

    def ask_stop(self) -> None:
        """Ctrl-C: build no new candidate (the builder's next batch raises Interrupted)."""
        self.stop_asked = True
        if self.budget is not None:
            self.budget.close("user")
        if self.builder is not None:
            self.builder.stop.set()

    # ------------------------------------------------------------------ workers
    def start_workers(self) -> None:
        """The builders and runners, the cost model and the pipelined search's states."""
        storage, config, target = self.db.storage, self.config, self.target
        # startup: extraction and Ray, less its database transactions (counted there)
        self.startup_sec = time.perf_counter() - self.start - self._db_sec()
        self.window_start = time.perf_counter()
        # a hard cap: records already there and the default schedules recorded below
        # count against --trials, and no search round builds past it
        self.budget = budget = TrialBudget(config.trials - self.trials_before)
        measure = measure_for(config.measure, target)
        self.builder = builder = RayBuilder(self.ledger, measure, self.db)
        self.runner = runner = RayRunner(
            self.ledger, measure, device_kind(target), exclusive=shares_host_cpu(target)
        )
        if self.stop_asked:  # Ctrl-C while Ray started
            self.ask_stop()
        if not runner.has_devices():  # before any build: a cuda job on CPU-only TVM
            raise TuneFarmError(runner.no_device_message())
        # the workers' imports while the driver readies the search
        runner.warm_up()
        builder.warm_up(min(RayConnection.cpus(), WARM_BUILDERS))
        # awaited here, in every search mode: nothing of it runs beside a measurement
        self.cost_model = self.prep.cost_model() if self.prep is not None else None
        self.search_actors = start_actor_search(
            self.found.tasks,
            target,
            self.db,
            builder,
            runner,
            config,
            budget,
            self.job_id,
            self.cost_model,
        )
        self.probe_time = _DriverTime(builder, runner, storage)

    def _db_sec(self) -> float:
        return self.db.storage.busy_sec - self.db_busy_at_start

    # ------------------------------------------------------------------ baselines
    def measure_baselines(self) -> None:
        """Each task's untuned default, timed and recorded (within the budget)."""
        assert self.builder and self.runner and self.budget and self.probe_time
        search = self.search_actors
        if search is not None and not search.plan.overlap_measure:
            search.wait_ready()  # no state built on the cores that time the defaults
        with self.probe_time:
            self.baselines, self.defaults_recorded = measure_baselines(
                self.found.tasks,
                self.target,
                self.builder,
                self.runner,
                self.db,
                self.job_id,
                self.budget,
            )
        for state, base in zip(self.states, self.baselines, strict=True):
            state.baseline_sec = base

    # ------------------------------------------------------------------ search
    def search(self, view: JobProgress) -> None:
        """The search, until the budget is spent (or the time budget, or Ctrl-C, ends it)."""
        assert self.builder and self.runner and self.budget
        builder, budget, config = self.builder, self.budget, self.config
        builder.budget = budget
        self.recorder = recorder = JobRecorder(
            self.db,
            self.ledger,
            self.found.tasks,
            self.target,
            self.job_id,
            self.states,
            view,
            self.trials_before + self.defaults_recorded,
        )
        recorder.stop = builder.stop
        recorder.confirm = self.runner.remeasure if config.confirm else None
        left = self._time_left()
        if left is not None and left <= 0 and budget.left > 0:
            budget.close("time")  # the defaults' measurement took the time budget
        pace = None if left is None else RoundPace(time.perf_counter() + left)
        builder.pace = recorder.pace = pace
        recorder.budget = budget
        if budget.left > 0:
            view.start(self.states, config.trials)
            view.advance(recorder.trials_before)  # the records before the search count
            try:
                with deadline(left, self._on_time):
                    self._run_search(recorder)
            finally:
                view.stop()
            self._note_search_end(pace)
        # the search's window only, not the probes after it
        window = time.perf_counter() - self.window_start
        slots = len(self.runner.slot_specs or [])
        self.devices = device_busy(self.runner.device_sec, window, slots)

    def _time_left(self) -> float | None:
        if self.config.time_budget_sec is None:
            return None
        return self.config.time_budget_sec - (time.perf_counter() - self.start)

    def _on_time(self) -> None:
        """The time budget: the actors' rounds end with the budget; MetaSchedule's C++ loop in
        the driver is unwound by the recorder after the round it records (or by the builder
        at its next batch), as on Ctrl-C."""
        assert self.budget and self.builder
        self.budget.close("time")
        if self.search_actors is None:
            self.builder.stop.set()

    def _run_search(self, recorder: JobRecorder) -> None:
        assert self.builder and self.runner and self.budget
        tasks, db, config, budget = self.found.tasks, self.db, self.config, self.budget
        if self.search_actors is not None:
            self.search_info = run_actor_search(
                self.search_actors,
                self.cost_model,
                tasks,
                db,
                recorder,
                config,
                budget,
                self.baselines,
            )
        else:
            search_in_driver(
                tasks,
                self.target,
                db,
                self.builder,
                self.runner,
                recorder,
                config,
                budget,
                self.search_info,
                self.cost_model,
            )

    def _note_search_end(self, pace: RoundPace | None) -> None:
        assert self.builder and self.budget
        builder, info = self.builder, self.search_info
        if self.budget.closed_by == "time":
            builder.stop.clear()  # the range probes below still build
        builder.pace = None
        if pace is not None:  # candidates that would have ended past the deadline
            info["cut_by_time"] = pace.cut
        if builder.cancelled:  # compiles the deadline or a Ctrl-C cut short
            info["builds_cancelled"] = builder.cancelled
        if builder.slow_cut:  # candidates cut as too slow to compile
            info["builds_too_slow"] = builder.slow_cut
        builder.cut_slow = False  # the range probes below are one build a kernel

    # ------------------------------------------------------------------ re-timing
    def retime(self) -> None:
        """Each task's top schedules re-timed paired and recorded (:mod:`tuner.job.retime`),
        when the job measured new candidates; the build's pick reflects them."""
        assert self.builder and self.runner
        config, recorder = self.config, self.recorder
        if config.retime < 2 or recorder is None or recorder.measured == 0:
            return
        builder, runner, storage = self.builder, self.runner, self.db.storage
        start = time.perf_counter()
        waits = (builder.wait_sec, runner.wait_sec, storage.busy_sec)
        # a time budget is a hard cap: none starts past its deadline, and a search the deadline
        # ended leaves no time (its last round was fitted to the deadline)
        deadline = None
        if config.time_budget_sec is not None:
            ended = self.budget.closed_by == "time"
            deadline = start if ended else self.start + config.time_budget_sec
        retiming = retime_tasks(
            self.found.tasks,
            self.target,
            builder,
            runner,
            self.db,
            self.job_id,
            config.retime,
            config.retime_rounds,
            deadline=deadline,
        )
        done = retiming.passes
        after = (builder.wait_sec, runner.wait_sec, storage.busy_sec)
        self.retime_waits = (after[0] - waits[0], after[1] - waits[1], after[2] - waits[2])
        self.retime_sec = time.perf_counter() - start
        self.search_info["retime"] = {
            "sec": round(self.retime_sec, 3),
            "tasks": len(done),
            # whether the time budget's deadline stopped it before a pass (tasks not reached
            # keep the pooled median's pick)
            "cut_by_time": retiming.cut_by_time,
            "promoted": sum(1 for r in done if r.winner != 0),
            # tasks whose build pick (the lowest pooled median) is not the rule's winner
            # after their last pass: a challenger the paired rounds could not tell apart
            "undecided": sum(1 for r in {r.task: r for r in done}.values() if not r.agrees),
            "runs": sum(r.rounds * len(r.candidates) for r in done),
            "by_task": [r.to_dict() for r in done],
        }

    # ------------------------------------------------------------------ probes
    def measure_probes(self) -> None:
        """What the build's dispatch rule weighs, after the search (nothing in the search
        reads it): each symbolic kernel's generic code and each bucket's range kernel as the
        build will make it from the final records."""
        assert self.builder and self.runner and self.probe_time
        found = self.found
        with self.probe_time:
            after = found.probes + range_probes(found.linked, found.by_name, self.db, self.target)
            measure_probes(after, self.target, self.builder, self.runner, self.db, self.job_id)

    def shutdown(self) -> None:
        """Stop the search actors and the runners; the phases' waits kept."""
        if self.search_actors is not None:
            self.search_actors.shutdown()
        if self.runner is not None:
            self.runner.shutdown()
        if self.builder is not None and self.runner is not None:
            self.phases = {"build_wait": self.builder.wait_sec, "run_wait": self.runner.wait_sec}

    # ------------------------------------------------------------------ end
    def end_badly(self, err: BaseException) -> None:
        """The job row of a job that did not finish: ``interrupted`` after a Ctrl-C (then
        :class:`JobInterrupted` is raised from here), else ``failed``."""
        storage, job_id = self.db.storage, self.job_id
        if self.stop_asked or isinstance(err, KeyboardInterrupt):
            done, new = self.trials_done, self.trials_done - self.trials_before
            why = f"interrupted by the user after {new} new trial(s)"
            update_job(
                storage,
                job_id,
                status="interrupted",
                finished_at=utcnow(),
                error=why,
                trials_done=done,
            )
            raise JobInterrupted(
                f"job {self.job_name} (#{job_id}) stopped after {done} of "
                f"{self.config.trials} trials ({new} new); its records are kept (the same "
                "command resumes it)"
            ) from None
        update_job(storage, job_id, status="failed", finished_at=utcnow(), error=str(err)[:2000])

    def summarize(self) -> JobSummary:
        """The finished job's figures; its row marked done."""
        if self.prep is not None and self.prep.note() is not None:
            self.search_info["cost_model"] = self.prep.note()  # cold, or from what history
        if self.recorder is not None and (confirmed := self.recorder.confirm_note()) is not None:
            self.search_info["confirmed"] = confirmed
        search, n = self.search_actors, len(self.states)
        progress = list(search.progress) if search is not None else [None] * n
        tasks = [
            self._task_summary(*row)
            for row in zip(self.found.tasks, self.states, progress, strict=True)
        ]
        done = self.trials_done
        record_job_tasks(
            self.db.storage,
            self.job_id,
            [self._task_row(*t) for t in zip(self.found.tasks, tasks, strict=True)],
        )
        update_job(
            self.db.storage, self.job_id, status="done", finished_at=utcnow(), trials_done=done
        )
        wall_sec = time.perf_counter() - self.start
        db_sec = self._db_sec()
        probe_sec = self.probe_time.sec if self.probe_time is not None else 0.0
        phases = {
            "startup": self.startup_sec,
            **self.phases,
            "database": db_sec,
            "probes": probe_sec,
        }
        if self.retime_sec:
            build, run, database = self.retime_waits
            phases["build_wait"] = phases.get("build_wait", 0.0) - build
            phases["run_wait"] = phases.get("run_wait", 0.0) - run
            phases["database"] -= database
            phases["retime"] = self.retime_sec
        phases["search"] = max(0.0, wall_sec - sum(phases.values()))
        return JobSummary(
            job_id=self.job_id,
            job_name=self.job_name,
            tasks=tasks,
            trials_budget=self.config.trials,
            trials_before=self.trials_before,
            trials_measured=done - self.trials_before,
            resumed_hits=self.recorder.resumed if self.recorder is not None else 0,
            wall_sec=wall_sec,
            skipped=self.found.skipped,
            db_sec=db_sec,
            phases=phases,
            search=self.search_info,
            devices=self.devices,
            stopped_by=self._stopped_by(),
            buckets=self.found.buckets,
        )

    def _stopped_by(self) -> str | None:
        """Why the search ended: a cap, Ctrl-C, every task converged, or None (its tasks'
        searches had nothing more to offer before the trials were spent)."""
        budget = self.budget
        if budget is None:
            return None
        if budget.closed_by is not None:
            return {"time": "time_budget", "user": "interrupted"}.get(budget.closed_by)
        if self.search_actors is not None and self.search_actors.converged:
            return "converged"
        return "trials" if budget.left <= 0 else None

    def _task_row(self, task: Any, summary: TaskSummary) -> dict[str, Any]:
        """The ``job_tasks`` row of a task's summary (:func:`database.jobs.record_job_tasks`)."""
        return {
            "workload_id": self.db.workload_id(task.mod),
            "name": summary.name,
            "weight": summary.weight,
            "trials": summary.trials,
            "best_sec": summary.best_sec,
            "baseline_sec": summary.baseline_sec,
            "expected_gain": summary.expected_gain,
            "converged": summary.converged,
            "converged_at": summary.converged_at,
        }

    def _task_summary(
        self, task: Any, state: TaskState, progress: TaskProgress | None
    ) -> TaskSummary:
        found = self.db.best(task.mod, self.target)
        estimate = progress.estimate if progress is not None else None
        return TaskSummary(
            name=task.name,
            weight=task.weight,
            trials=self.db.count_records(task.mod, self.target),
            failed=state.failed,
            best_sec=found.mean_sec if found and found.level in ("device", "target") else None,
            baseline_sec=state.baseline_sec,
            flops=task.flops,
            expected_gain=None if estimate is None else round(estimate.expected_gain, 4),
            converged=progress is not None and progress.converged,
            searched=progress.tried[-1] if progress is not None and progress.tried else 0,
            converged_at=progress.converged_at if progress is not None else None,
        )


def _config_row(config: TuneConfig) -> dict[str, Any]:
    """What the job row keeps of its config."""
    return {
        "trials": config.trials,
        "measure": config.measure.to_dict(),
        "cost_model": config.cost_model,
        "warm_start": config.warm_start,
        "transfer": config.transfer,
        "exchange": config.exchange,
        "time_budget_sec": config.time_budget_sec,
        "until_converged": config.until_converged,
        "retime": config.retime,
        "retime_rounds": config.retime_rounds,
    }


class _DriverTime:
    """The driver's own time inside a ``with`` block (repeatable), less what it waited on the
    builder and the runner and spent in database transactions (phases of their own)."""

    def __init__(self, builder: RayBuilder, runner: RayRunner, storage: Storage) -> None:
        self._parts = (builder, runner, storage)
        self.sec = 0.0

    def _others(self) -> float:
        builder, runner, storage = self._parts
        return builder.wait_sec + runner.wait_sec + storage.busy_sec

    def __enter__(self) -> None:
        self._start = time.perf_counter() - self._others()

    def __exit__(self, *exc: object) -> None:
        self.sec += max(0.0, time.perf_counter() - self._others() - self._start)


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER")
