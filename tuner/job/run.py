"""A tuning job: extract tasks, search with MetaSchedule on Ray workers, record into SQL."""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import Measurement, Storage, TuneFarmDatabase, shash_of
from database.jobs import start_job, update_job
from database.models import utcnow
from tuner.cost_model import check_name
from tuner.errors import JobInterrupted, TuneFarmError
from tuner.interrupt import deadline, stop_on_sigint, until_time_is_up
from tuner.pipeline import Task, extract_tasks, prepare
from tuner.progress import JobProgress, SilentProgress, TaskState
from tuner.search.driver import ActorSearch, SearchPlan
from tuner.search.task import GENERATIONS, SIBLINGS, ModelSpec
from tuner.startup import SearchPrep
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, symbolic_vars
from tuner.symbolic.probes import generic_probes, measure_probes, range_probes
from tuner.targets import device_kind
from workers.builder import RayBuilder
from workers.config import MeasureConfig
from workers.connection import RayConnection
from workers.ledger import Interrupted, Ledger, RoundPace, TrialBudget
from workers.results import ErrorKind, RunResult
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.job")


SEARCH_MODES = ("auto", "ray", "thread", "driver")
# the largest search round of a job with a time budget: the round in flight when the time is
# up is dropped, so rounds of MetaSchedule's 64 would waste up to 64 candidates' search and
# builds (and their first result would come that much later)
TIMED_ROUND_CAP = 16
# build workers whose sandboxes a job starts as Ray comes up: one per CPU, at most this many
# (a timed job's round cap; on a larger cluster the others start with their first build)
WARM_BUILDERS = 16


@dataclass(frozen=True)
class TuneConfig:
    """What a tuning job does; validated at construction."""

    trials: int
    trials_per_iter: int = 64
    seed: int | None = None
    job_name: str | None = None
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    # the search's cost model by name (see tuner.cost_model); warm_start: pre-train ours
    # from the database (its latest snapshot or its records) before the first round
    cost_model: str = "tunefarm"
    warm_start: bool = True
    # seed each bucket's search with the refitted best schedules of its other buckets
    # (database.transfer; opt-in: two benchmark seeds were inconclusive)
    transfer: bool = False
    # a planned split (tuner.symbolic.planner): task name -> the records it should have after the
    # job; each listed task is searched on its own up to its count (None: the gradient
    # scheduler shares the budget)
    task_trials: tuple[tuple[str, int], ...] | None = None
    # the evolutionary search's population per round (None: sized from the round, see
    # search_population; MetaSchedule's default is 512 whatever the round asks for)
    population: int | None = None
    # generations the evolutionary search evolves its population per round, each scored by
    # the cost model (None: tuner.search.task.GENERATIONS, 2; MetaSchedule's default is 4)
    generations: int | None = None
    # where the evolutionary search runs: "ray" (each task's state in a search actor, rounds
    # pipelined with builds; tuner.search), "thread" (the same pipelined loop, the states in a
    # thread of the driver), "driver" (MetaSchedule's own task loop, rounds one after the
    # other) or "auto" (see resolve_search)
    search: str = "auto"
    # wall-clock seconds the job may take, from its start, before its search stops (the
    # round in flight is dropped, the job ends as usual); None: only the trials limit it
    time_budget_sec: float | None = None
    # with warm_start, a task without records of its own first measures this many of the
    # database's best schedules of its kernel at other buckets, refitted to its shape (one
    # round: at most a round's size and one in tuner.search.driver.SIBLING_SHARE of the task's
    # share of the trials; database.seeds): the history's winners, timed at once, not only
    # the cost model's view of them
    siblings: int = SIBLINGS
    # with warm_start, each later round of a task starts with its kernel's new best at the
    # nearest other bucket, refitted (the bucket exchange: ActorSearch._exchange). Opt-in:
    # at equal wall time over 5 seeds it did not beat the job without it (QKV re-timed 1.20x
    # the latency, MLP 0.96x; docs/time-to-quality.md)
    exchange: bool = False
    # a round's fastest candidate, when it beats its task's best, is timed a second time and
    # recorded with both timings (JobRecorder._confirmed): a new best is never one lucky run
    confirm: bool = True
    # the search asks for twice a round and measures the round's worth with the most of the
    # cost model's rank per expected compile second, learnt from the task's own builds by
    # unroll limit (tuner.search.compile_cost); off: the model's first, as MetaSchedule does.
    # Opt-in: at the same trials (5 seeds) a warm QKV job took 0.90x the wall time without it,
    # at the same final latency; the MLP and the transformer block gained no wall time, and
    # the MLP's warm final kernels re-timed 1.12x slower (docs/time-to-quality.md)
    compile_aware: bool = False

    @property
    def round_cap(self) -> int:
        """The most candidates a search round may have: ``trials_per_iter``, and with a time
        budget at most :data:`TIMED_ROUND_CAP` (the round in flight at the deadline is lost)."""
        if self.time_budget_sec is None:
            return self.trials_per_iter
        return min(self.trials_per_iter, TIMED_ROUND_CAP)

    def population_for(self, per_round: int) -> int:
        """The evolutionary search's population for rounds of ``per_round`` candidates:
        ``population`` when set, else sized from the round (:func:`search_population`)."""
        return self.population or search_population(per_round)

    @property
    def search_generations(self) -> int:
        """Generations a round evolves: ``generations``, else :data:`GENERATIONS`."""
        return self.generations or GENERATIONS

    def __post_init__(self) -> None:
        check_name(self.cost_model)
        if self.time_budget_sec is not None and not (
            math.isfinite(self.time_budget_sec) and self.time_budget_sec > 0
        ):
            raise TuneFarmError(
                f"the time budget must be a positive number of seconds (got {self.time_budget_sec})"
            )
        if self.search not in SEARCH_MODES:
            raise TuneFarmError(
                f"unknown search mode {self.search!r}; valid: {', '.join(SEARCH_MODES)}"
            )
        if self.population is not None and self.population < 2:
            raise TuneFarmError(f"population must be at least 2 (got {self.population})")
        if self.siblings < 0:
            raise TuneFarmError(f"siblings must be at least 0 (got {self.siblings})")
        if self.generations is not None and self.generations < 1:
            raise TuneFarmError(f"generations must be at least 1 (got {self.generations})")
        if self.trials < 1:
            raise TuneFarmError(f"--trials must be at least 1 (got {self.trials})")
        if self.trials_per_iter < 1:
            raise TuneFarmError(
                f"trials per iteration must be at least 1 (got {self.trials_per_iter})"
            )


@dataclass(frozen=True)
class TaskSummary:
    """End-of-job figures for one task."""

    name: str
    weight: int
    trials: int
    failed: int
    best_sec: float | None
    baseline_sec: float | None
    flops: float | None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.best_sec / 1e9 if self.flops and self.best_sec else None

    @property
    def speedup(self) -> float | None:
        if self.best_sec and self.baseline_sec:
            return self.baseline_sec / self.best_sec
        return None


@dataclass(frozen=True)
class JobSummary:
    """End-of-job figures."""

    job_id: int
    job_name: str
    tasks: list[TaskSummary]
    trials_budget: int
    trials_before: int
    trials_measured: int
    resumed_hits: int
    wall_sec: float
    skipped: list[str]
    db_sec: float = 0.0  # time spent in database transactions (the driver's share)
    # the driver's wall time by phase: startup (extraction, Ray), build_wait, run_wait,
    # database, probes (preparing the untuned defaults before the search and the dispatch
    # rule's probes after it, less their waits), search (the rest: search strategy, cost
    # model, MetaSchedule bookkeeping)
    phases: dict[str, float] = field(default_factory=dict)
    # how the search ran: mode, and for "ray" its actors, nodes, rounds, restarts, and the
    # search work done off the driver (actor_busy_sec)
    search: dict[str, Any] = field(default_factory=dict)
    # how busy the devices were while the job had budget left (from Ray being up to the
    # budget spent): busy_sec (the device actors' time on candidates), window_sec, slots and
    # busy = busy_sec / (window_sec * slots)
    devices: dict[str, Any] = field(default_factory=dict)
    # why the search ended before the trials were spent: "time" (the time budget) or None
    stopped_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for t, d in zip(self.tasks, out["tasks"], strict=True):
            d["gflops"], d["speedup"] = t.gflops, t.speedup
        return out


# a round's candidates timed a second time at most (JobRecorder._confirmed)
MAX_CONFIRMATIONS = 3


@derived_object
class JobRecorder(PyMeasureCallback):
    """Commits every measured candidate with its provenance and updates the live view.

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
        self.trials_before = trials_before  # recorded before the search started
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
        {index: the second measurement's run times}, its record the mean of both. If that
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
            if secs and i in confirmed:
                secs += confirmed[i]
            state.trials += 1
            if r_res.error_msg is None and secs:
                mean = sum(secs) / len(secs)
                state.best_sec = mean if state.best_sec is None else min(state.best_sec, mean)
            else:
                state.failed += 1
            if entry is None or entry.cached:
                self.resumed += 1
                continue
            self.measured += 1
            kind = ErrorKind.parse(b_res.error_msg or r_res.error_msg)
            trace, args_info = as_json(i)
            run, build = entry.run, entry.build
            batch.append(
                Measurement(
                    workload=workload,
                    candidate_hash=entry.candidate_hash,
                    trace_json=trace,
                    args_info_json=args_info,
                    run_secs=secs if kind is None else None,
                    target=self.target,
                    error_kind=kind.value if kind else None,
                    error_msg=b_res.error_msg or r_res.error_msg,
                    device=run.device if run else None,
                    worker=(run.worker if run else None) or (build.worker if build else None),
                    job_id=self.job_id,
                    build_sec=build.build_sec if build else None,
                )
            )
        # a resumed hit is one of the records counted in trials_before; the round's records
        # and the job's progress land in one commit
        self.db.add_round(batch, (self.job_id, {"trials_done": self.trials_before + self.measured}))
        self.view.advance(self.measured - measured_before)
        if self.pace is not None:
            self.pace.recorded()


def _quiet_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(f"tunefarm.ms.{name}")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def measure_baselines(
    tasks: list[Task],
    target: tvm.target.Target,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase | None = None,
    job_id: int | None = None,
    budget: TrialBudget | None = None,
) -> list[float | None]:
    """Latency of each task's untuned default build, measured by the same workers.

    The default is the unscheduled kernel on a CPU and dlight's schedule on a GPU (where an
    unscheduled kernel would run as host code on device memory). With ``db``, each default is
    also recorded as a candidate (its trace: empty on a CPU), as long as ``budget`` has a slot
    for it (every one is measured all the same), so a task's best record is never slower
    than its untuned build.
    """
    if device_kind(target) == "cuda":  # the default is dlight's schedule, with its trace
        from tuner.compile import default_gpu_trace

        defaults = [default_gpu_trace(t.mod, target) for t in tasks]
    else:  # the unscheduled kernel: an empty trace
        defaults = [tvm.s_tir.Schedule(t.mod) for t in tasks]
    results = builder.build([BuilderInput(d.mod, target) for d in defaults])
    inputs = []
    for task, res in zip(tasks, results, strict=True):
        args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
        inputs.append(RunnerInput(res.artifact_path, device_kind(target), args))
    out: list[float | None] = []
    for task, default, res, inp, fut in zip(
        tasks, defaults, results, inputs, runner.run(inputs), strict=True
    ):
        r = fut.result()
        entry = builder.ledger.pop(res.artifact_path)
        secs = [float(s) for s in r.run_secs] if r.run_secs else None
        ok = bool(secs) and r.error_msg is None
        out.append(sum(secs) / len(secs) if ok else None)
        if not ok or db is None or entry is None or entry.cached:
            continue
        # The default schedule is a candidate too: with it recorded, the best record of a
        # task is never slower than the untuned build.
        workload = db.commit_workload(task.mod)
        try:
            trace, _, _, args_info = TuningRecord(
                default.trace, workload, None, target, inp.args_info
            ).as_json()
        except TypeError as err:  # dlight's layout rewrites (an IndexMap) have no JSON form
            log.info("%s: default schedule not recorded: %s", task.name, err)
            continue
        if budget is not None and not budget.take():
            continue
        db.add(
            Measurement(
                workload=workload,
                candidate_hash=entry.candidate_hash,
                trace_json=trace,
                args_info_json=args_info,
                run_secs=secs,
                target=target,
                device=entry.run.device if entry.run else None,
                worker=entry.run.worker if entry.run else None,
                job_id=job_id,
                build_sec=entry.build.build_sec if entry.build else None,
            )
        )
    return out


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
    """
    start = time.perf_counter()
    db = TuneFarmDatabase(storage, target, seeds=16 if config.transfer else 0)
    db_busy_at_start = storage.busy_sec
    all_tasks = extract_tasks(prepare(mod, target), target)
    skipped: list[str] = []
    if symbolic_vars(mod):
        by_name = {t.name: t for t in all_tasks}
        kernels = {name: t.mod["main"] for name, t in by_name.items()}
        tasks = []
        linked: list[tuple[Task, dict[str, int], tuple[str, ...]]] = []
        for bt in bucket_tasks(mod, target, choose_buckets(mod, buckets), kernels):
            # the family is the symbolic kernel this task is at its bucket, by structure
            # (names differ between the symbolic and the specialized module); else the
            # kernel of its name, whose records the build only replays on its own kernel
            base = bt.task.name.split("[", 1)[0]
            owner = bt.kernels[0] if bt.kernels else base
            family = (shash_of(by_name[owner].mod), bt.bucket) if owner in by_name else None
            db.workload_id(bt.task.mod, create=True, task_name=base, family=family)
            tasks.append(bt.task)
            linked.append((bt.task, bt.bucket, bt.kernels))
        probes = generic_probes(linked, by_name)
    else:
        probes, linked, by_name = [], [], {}
        tasks = [t for t in all_tasks if not t.is_symbolic]
        skipped = [
            f"{t.name} (symbolic: {', '.join(t.symbolic_vars)})" for t in all_tasks if t.is_symbolic
        ]
    if not tasks:
        raise TuneFarmError("the model has no task to tune")

    def recorded() -> int:  # records the model's tasks have on the target
        return sum(db.count_records(t.mod, target) for t in tasks)

    trials_before = recorded()
    job_name = config.job_name or f"{model_name or 'model'}-{time.strftime('%Y%m%d-%H%M%S')}"
    job_id = start_job(
        db.storage,
        name=job_name,
        model=model_name,
        target_json=json.dumps(target.export(), default=list),
        budget=config.trials,
        trials_done=trials_before,
        submitted_by=_user(),
        config_json=json.dumps(
            {
                "trials": config.trials,
                "measure": config.measure.to_dict(),
                "cost_model": config.cost_model,
                "warm_start": config.warm_start,
                "transfer": config.transfer,
                "exchange": config.exchange,
                "time_budget_sec": config.time_budget_sec,
            }
        ),
    )
    states = [TaskState(name=t.name, flops=t.flops) for t in tasks]
    ledger = Ledger()
    # the search's intrinsics and cost model, made while Ray starts (nothing to make without
    # a budget)
    prep = (
        SearchPrep(
            target,
            db.storage,
            [t.mod for t in tasks],
            config.cost_model,
            config.seed,
            config.warm_start,
        )
        if config.trials > trials_before
        else None
    )
    search_info: dict[str, Any] = {"mode": "driver"}
    recorder: JobRecorder | None = None
    builder: RayBuilder | None = None
    budget: TrialBudget | None = None
    try:
        with RayConnection(address) as _ray, contextlib.ExitStack() as stops:
            # startup: extraction and Ray, less its database transactions (counted there)
            startup_sec = time.perf_counter() - start - (storage.busy_sec - db_busy_at_start)
            window_start = time.perf_counter()
            # a hard cap: records already there and the default schedules recorded below
            # count against --trials, and no search round builds past it
            budget = TrialBudget(config.trials - trials_before)
            measure = measure_for(config.measure, target)
            builder = RayBuilder(ledger, measure, db)
            runner = RayRunner(
                ledger, measure, device_kind(target), exclusive=shares_host_cpu(target)
            )
            if not runner.has_devices():  # before any build: a cuda job on CPU-only TVM
                raise TuneFarmError(runner.no_device_message())
            # the workers' imports while the driver readies the search
            runner.warm_up()
            builder.warm_up(min(RayConnection.cpus(), WARM_BUILDERS))
            # awaited here, in every search mode: nothing of it runs beside a measurement
            cost_model = prep.cost_model() if prep is not None else None
            search = _start_actor_search(
                tasks, target, db, builder, runner, config, budget, job_id, cost_model
            )
            # Ctrl-C: no new candidate is built; the builder's next batch raises Interrupted
            stop, spend = builder.stop.set, budget.close
            stops.enter_context(stop_on_sigint(lambda: (spend("user"), stop())))
            probe_sec = _DriverTime(builder, runner, storage)
            try:
                if search is not None and not search.plan.overlap_measure:
                    search.wait_ready()  # no state built on the cores that time the defaults
                with probe_sec:
                    baselines = measure_baselines(
                        tasks, target, builder, runner, db, job_id, budget
                    )
                for state, base in zip(states, baselines, strict=True):
                    state.baseline_sec = base
                builder.budget = budget
                view = progress or SilentProgress()
                recorder = JobRecorder(db, ledger, tasks, target, job_id, states, view, recorded())
                recorder.stop = builder.stop
                recorder.confirm = runner.remeasure if config.confirm else None
                left = (
                    None
                    if config.time_budget_sec is None
                    else (config.time_budget_sec - (time.perf_counter() - start))
                )
                if left is not None and left <= 0 and budget.left > 0:
                    budget.close("time")  # the defaults' measurement took the time budget
                pace = None if left is None else RoundPace(time.perf_counter() + left)
                builder.pace = recorder.pace = pace
                recorder.budget = budget
                if budget.left > 0:
                    view.start(states, budget.left)
                    # the time budget: actors' rounds end with the budget; MetaSchedule's C++
                    # loop in the driver is unwound by the recorder after the round it records
                    # (or by the builder at its next batch), as on Ctrl-C
                    on_time = (
                        (lambda: spend("time"))
                        if search is not None
                        else lambda: (spend("time"), stop())
                    )
                    try:
                        with deadline(left, on_time):
                            if search is not None:
                                search_info = _run_actor_search(
                                    search,
                                    cost_model,
                                    tasks,
                                    db,
                                    recorder,
                                    config,
                                    budget,
                                    baselines,
                                )
                            else:
                                _search(
                                    tasks,
                                    target,
                                    db,
                                    builder,
                                    runner,
                                    recorder,
                                    config,
                                    budget,
                                    search_info,
                                    cost_model,
                                )
                    finally:
                        view.stop()
                    if budget.closed_by == "time":
                        builder.stop.clear()  # the range probes below still build
                    builder.pace = None
                    if pace is not None:  # candidates that would have ended past the deadline
                        search_info["cut_by_time"] = pace.cut
                    if builder.cancelled:  # compiles the deadline or a Ctrl-C cut short
                        search_info["builds_cancelled"] = builder.cancelled
                    if builder.slow_cut:  # candidates cut as too slow to compile
                        search_info["builds_too_slow"] = builder.slow_cut
                    builder.cut_slow = False  # the range probes below are one build a kernel
                window = time.perf_counter() - window_start
                busy = runner.device_sec  # the search's window only, not the probes after it
                # what the build's dispatch rule weighs, after the search (nothing in the search
                # reads it): each symbolic kernel's generic code and each bucket's range kernel
                # as the build will make it from the final records
                with probe_sec:
                    after = probes + range_probes(linked, by_name, db, target)
                    measure_probes(after, target, builder, runner, db, job_id)
            finally:
                if search is not None:
                    search.shutdown()
                runner.shutdown()
            waits = {"build_wait": builder.wait_sec, "run_wait": runner.wait_sec}
            devices = device_busy(busy, window, len(runner.slot_specs or []))
    except BaseException as err:
        if budget is not None and budget.closed_by == "user":  # Ctrl-C: whatever unwound the job
            new = recorded() - trials_before
            why = f"interrupted by the user after {new} new trial(s)"
            update_job(db.storage, job_id, status="interrupted", finished_at=utcnow(), error=why)
            raise JobInterrupted(
                f"job {job_name} (#{job_id}) stopped after {new} of "
                f"{config.trials - trials_before} trials; its records are kept (the same "
                "command resumes it)"
            ) from None
        update_job(db.storage, job_id, status="failed", finished_at=utcnow(), error=str(err)[:2000])
        raise
    finally:
        if prep is not None:  # its thread ends with the job, whatever ended the job
            prep.close()
    if prep is not None and prep.note() is not None:
        search_info["cost_model"] = prep.note()  # how it started: cold, or from what history
    if recorder is not None and (confirmed := recorder.confirm_note()) is not None:
        search_info["confirmed"] = confirmed
    summaries = []
    for task, state in zip(tasks, states, strict=True):
        found = db.best(task.mod, target)
        trials = db.count_records(task.mod, target)
        summaries.append(
            TaskSummary(
                name=task.name,
                weight=task.weight,
                trials=trials,
                failed=state.failed,
                best_sec=found.mean_sec if found and found.level in ("device", "target") else None,
                baseline_sec=state.baseline_sec,
                flops=task.flops,
            )
        )
    update_job(
        db.storage,
        job_id,
        status="done",
        finished_at=utcnow(),
        trials_done=sum(t.trials for t in summaries),
    )
    wall_sec = time.perf_counter() - start
    db_sec = storage.busy_sec - db_busy_at_start
    phases = {"startup": startup_sec, **waits, "database": db_sec, "probes": probe_sec.sec}
    phases["search"] = max(0.0, wall_sec - sum(phases.values()))
    return JobSummary(
        job_id=job_id,
        job_name=job_name,
        tasks=summaries,
        trials_budget=config.trials,
        trials_before=trials_before,
        trials_measured=sum(t.trials for t in summaries) - trials_before,
        resumed_hits=recorder.resumed,
        wall_sec=wall_sec,
        skipped=skipped,
        db_sec=db_sec,
        phases=phases,
        search=search_info,
        devices=devices,
        stopped_by=budget.closed_by if budget is not None else None,
    )


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


def _start_actor_search(
    tasks: list[Task],
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    builder: RayBuilder,
    runner: RayRunner,
    config: TuneConfig,
    budget: TrialBudget,
    job_id: int,
    cost_model: Any,
) -> ActorSearch | None:
    """The task-parallel search of ``tasks`` (its actors started, holding copies of the job's
    ``cost_model``), or None when the job searches in the driver: ``search="driver"``, the
    opt-in cross-bucket seeds (which the actors' databases do not hold), or no budget left."""
    mode = resolve_search(config.search, target)
    if mode == "driver" or config.transfer or budget.left <= 0 or cost_model is None:
        return None
    if config.task_trials is None:
        per_round = trials_per_round(config.round_cap, budget.left, len(tasks))
    else:
        most = max((n for _, n in config.task_trials), default=1)
        per_round = trials_per_round(config.round_cap, most, 1)
    plan = SearchPlan(
        per_round=per_round,
        population=config.population_for(per_round),
        generations=config.search_generations,
        seed=config.seed,
        overlap_measure=device_kind(target) != "cpu",
        job_id=job_id,
        host=mode,
        siblings=config.siblings if config.warm_start else 0,
        exchange=config.exchange and config.warm_start,
        compile_aware=config.compile_aware,
    )
    search = ActorSearch(
        tasks, target, db, builder, runner, model_spec(config, cost_model), plan, config.trials
    )
    search.start()
    return search


def device_busy(busy_sec: float, window_sec: float, slots: int) -> dict[str, Any]:
    """The job summary's ``devices`` entry: the share of the devices' time spent measuring."""
    busy = busy_sec / (window_sec * slots) if window_sec > 0 and slots else None
    return {"busy_sec": busy_sec, "window_sec": window_sec, "slots": slots, "busy": busy}


def resolve_search(mode: str, target: tvm.target.Target) -> str:
    """``ray``, ``thread`` or ``driver`` for a job's ``search`` mode on the connected cluster.

    ``auto`` is ``ray`` where search actors add capacity: a cluster with more than one node
    offering CPUs, or a device that is not the host CPU (the search then keeps running while
    candidates are measured). On one node measuring on its own CPU (the embedded default) it
    is ``thread``: the same pipelined rounds, the search beside the builds in a thread of the
    driver, where actors would cost a process importing TVM each (about 8 s of a core) for
    the same cores (docs/architecture.md#search-actors has the measurements)."""
    if mode != "auto":
        return mode
    return "thread" if shares_host_cpu(target) else "ray"


def shares_host_cpu(target: tvm.target.Target) -> bool:
    """Whether the job measures on the CPU that its search and builds run on: a CPU target on
    a cluster with one node offering CPUs (the embedded default)."""
    import ray

    cpu_nodes = sum(
        1 for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    )
    return cpu_nodes <= 1 and device_kind(target) == "cpu"


def model_spec(config: TuneConfig, cost_model: Any) -> ModelSpec:
    """The job's cost model as the search actors rebuild it."""
    from tuner.search.task import search_threads

    state = None
    if config.cost_model == "tunefarm":
        state = cost_model.state(nthread=search_threads())
    return ModelSpec(config.cost_model, config.seed, state)


def _run_actor_search(
    search: ActorSearch,
    cost_model: Any,
    tasks: list[Task],
    db: TuneFarmDatabase,
    recorder: JobRecorder,
    config: TuneConfig,
    budget: TrialBudget,
    baselines: list[float | None],
) -> dict[str, Any]:
    want = None
    if config.task_trials is not None:  # a planned split: each task up to its count
        split = dict(config.task_trials)
        want = [
            max(0, split.get(t.name, 0) - db.count_records(t.mod, recorder.target)) for t in tasks
        ]
    search.run(recorder, budget, want, baselines)
    features = search.finish()
    if hasattr(cost_model, "add_measured"):
        cost_model.add_measured(features)
    _store_features(cost_model, db, recorder.target)
    stats = search.stats
    return {
        "mode": search.plan.host,
        "per_round": search.plan.per_round,
        "population": search.plan.population,
        "actors": stats.actors,
        "nodes": stats.nodes,
        "rounds": stats.rounds,
        "restarts": stats.restarts,
        "exchanged": stats.exchanged,
        "sibling_tasks": stats.sibling_tasks,
        "siblings": stats.siblings,
        "prior_tasks": stats.prior_tasks,
        "actor_busy_sec": stats.actor_busy_sec,
        "wait_sec": stats.wait_sec,
        # candidates timed by their single runs alone, slower than their screen
        "screened": search.runner.screened,
        "screen": search.runner.config.screen,
        "events": list(stats.events),
    }


def _search(
    tasks: list[Task],
    target: tvm.target.Target,
    db: TuneFarmDatabase,
    builder: RayBuilder,
    runner: RayRunner,
    recorder: JobRecorder,
    config: TuneConfig,
    budget: TrialBudget,
    info: dict[str, Any],
    cost_model: Any,
) -> None:
    """MetaSchedule's search over ``tasks`` with the job's ``cost_model``; the builder drops
    candidates past ``budget``.

    MetaSchedule counts a resumed hit (a candidate measured in an earlier job, never built) as
    a trial too, and its evolutionary search re-proposes records from the database, so a
    resumed job may end with slots of its budget left.
    """
    threads = os.cpu_count() or 1
    seed = config.seed if config.seed is not None else -1
    remaining = budget.left
    if config.task_trials is None:
        per_round = trials_per_round(config.round_cap, remaining, len(tasks))
    else:  # each task on its own: the round of the task with the largest share
        most = max((n for _, n in config.task_trials), default=1)
        per_round = trials_per_round(config.round_cap, most, 1)
    # what a round is: its candidates and the population its evolutionary search evolves
    info.update(per_round=per_round, population=config.population_for(per_round))
    contexts = [
        ms.TuneContext(
            mod=t.mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=_strategy(config, per_round),
            task_name=t.name,
            rand_state=seed if seed < 0 else seed + i,
            num_threads=threads,
            logger=_quiet_logger(t.name),
        ).clone()
        for i, t in enumerate(tasks)
    ]
    with until_time_is_up(budget):
        if config.task_trials is not None:
            _search_split(
                tasks, contexts, db, builder, runner, recorder, config, budget, cost_model
            )
        else:
            workers = (builder, runner, db, cost_model, recorder)
            _tune_tasks(contexts, [float(t.weight) for t in tasks], remaining, per_round, *workers)
    _store_features(cost_model, db, target)


def _tune_tasks(
    contexts: list[Any],
    weights: list[float],
    trials: int,
    per_round: int,
    builder: RayBuilder,
    runner: RayRunner,
    db: TuneFarmDatabase,
    cost_model: Any,
    recorder: JobRecorder,
) -> None:
    """MetaSchedule's task loop (gradient scheduler) over ``contexts`` for ``trials``."""
    with tempfile.TemporaryDirectory(prefix="tunefarm-") as work_dir:
        ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=weights,
            work_dir=work_dir,
            max_trials_global=trials,
            num_trials_per_iter=per_round,
            builder=builder,
            runner=runner,
            database=db,
            cost_model=cost_model,
            measure_callbacks=[recorder, ms.measure_callback.UpdateCostModel()],
            task_scheduler=ms.TaskScheduler.create("gradient"),
        )


def _store_features(cost_model: Any, db: TuneFarmDatabase, target: tvm.target.Target) -> None:
    if hasattr(cost_model, "store_features"):  # ours: cache its features of the job's records
        cost_model.store_features(db.storage, target)  # for the next warm start (best effort)


def _search_split(
    tasks: list[Task],
    contexts: list[Any],
    db: TuneFarmDatabase,
    builder: RayBuilder,
    runner: RayRunner,
    recorder: JobRecorder,
    config: TuneConfig,
    budget: TrialBudget,
    cost_model: Any,
) -> None:
    """The search of a planned split (``config.task_trials``): each listed task on its own,
    up to the records it should have, one after the other with the job's cost model; tasks
    the split does not list get no search (their default schedule is measured)."""
    want = dict(config.task_trials or ())
    for i, task in enumerate(tasks):
        recorded = db.count_records(task.mod, recorder.target)
        left = min(want.get(task.name, 0) - recorded, budget.left)
        if left <= 0:
            continue
        recorder.index = [i]
        try:
            per_round = trials_per_round(config.round_cap, left, 1)
            workers = (builder, runner, db, cost_model, recorder)
            _tune_tasks([contexts[i]], [float(task.weight)], left, per_round, *workers)
        finally:
            recorder.index = None


# MetaSchedule's EvolutionarySearch population, and the least one a round gets (each round
# samples at least 50 new schedules beside the 20% it takes from the database)
MAX_POPULATION = 512
MIN_POPULATION = 64
POPULATION_PER_CANDIDATE = 8


def measure_for(measure: MeasureConfig, target: tvm.target.Target) -> MeasureConfig:
    """``measure`` with the thread count host kernels are timed with: the target's
    ``num-cores`` (what its schedules parallelize for and ``bench`` runs with) unless set."""
    cores = target.attrs.get("num-cores")
    if measure.threads is not None or device_kind(target) == "cuda" or not cores:
        return measure
    return replace(measure, threads=int(cores))


def search_population(per_round: int) -> int:
    """The evolutionary search's population for rounds of ``per_round`` candidates:
    :data:`POPULATION_PER_CANDIDATE` per candidate, between :data:`MIN_POPULATION` and
    MetaSchedule's :data:`MAX_POPULATION`. Every round samples, mutates and scores its whole
    population for several generations, so a population of 512 for a round of one or two
    candidates (a dozen bucket tasks sharing a small budget) spends most of a job in the
    driver. The search's time per measured candidate is proportional to this ratio. At equal
    wall time (5 seeds, rounds of 8, docs/time-to-quality.md): 32 → 16 per candidate took a
    QKV job's search share from 36% to 27% and its measured candidates from 95 to 122; 16 → 8
    took it from 30% to 22% and reached 90% of the best in 0.76x stock's time against 0.99x,
    its final kernels re-timed at 0.65x stock's latency against 0.82x."""
    return max(MIN_POPULATION, min(MAX_POPULATION, POPULATION_PER_CANDIDATE * per_round))


def _strategy(config: TuneConfig, per_round: int) -> Any:
    return ms.search_strategy.EvolutionarySearch(
        population_size=config.population_for(per_round),
        genetic_num_iters=config.search_generations,
    )


def trials_per_round(cap: int, remaining: int, n_tasks: int) -> int:
    """Candidates per search round: at most ``cap``; small enough that every task gets about
    two rounds of the budget, or at least one when the budget is tight. The gradient scheduler
    visits tasks in order at first, so a larger round would spend the budget on the first
    tasks and leave later buckets untuned."""
    return max(1, min(cap, remaining // (2 * n_tasks) or remaining // n_tasks or 1))


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER")
