"""Where a job's search runs (``TuneConfig.search``): the pipelined search of
:mod:`tuner.search.driver` (its states in Ray actors or a driver thread), or MetaSchedule's own
task loop in the driver (the gradient scheduler, or a planned split task by task)."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, NamedTuple

import tvm
from tvm.s_tir import meta_schedule as ms

from database import TuneFarmDatabase
from tuner.interrupt import until_time_is_up
from tuner.job.config import TuneConfig
from tuner.job.recorder import JobRecorder
from tuner.pipeline import Task
from tuner.search.driver import ActorSearch, SearchPlan
from tuner.search.population import trials_per_round
from tuner.search.task import ModelSpec
from tuner.targets import device_kind
from workers.builder import RayBuilder
from workers.ledger import TrialBudget
from workers.runner import RayRunner


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


def start_actor_search(
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
        converge_gain=config.until_converged,
        matvec=config.matvec,
        gemm=config.gemm,
    )
    search = ActorSearch(
        tasks, target, db, builder, runner, model_spec(config, cost_model), plan, config.trials
    )
    search.start()
    return search


def run_actor_search(
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
        "matvec_tasks": stats.matvec_tasks,
        "gemm_tasks": stats.gemm_tasks,
        "prior_tasks": stats.prior_tasks,
        "actor_busy_sec": stats.actor_busy_sec,
        "wait_sec": stats.wait_sec,
        # candidates timed by their single runs alone, slower than their screen
        "screened": search.runner.screened,
        "screen": search.runner.config.screen,
        "events": list(stats.events),
    }


def search_in_driver(
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
    workers = _Workers(builder, runner, db, cost_model, recorder)
    with until_time_is_up(budget):
        if config.task_trials is not None:
            _search_split(tasks, contexts, config, budget, workers)
        else:
            _tune_tasks(contexts, [float(t.weight) for t in tasks], remaining, per_round, workers)
    _store_features(cost_model, db, target)


class _Workers(NamedTuple):
    """What MetaSchedule's task loop runs with."""

    builder: RayBuilder
    runner: RayRunner
    db: TuneFarmDatabase
    cost_model: Any
    recorder: JobRecorder


def _tune_tasks(
    contexts: list[Any], weights: list[float], trials: int, per_round: int, workers: _Workers
) -> None:
    """MetaSchedule's task loop (gradient scheduler) over ``contexts`` for ``trials``."""
    builder, runner, db, cost_model, recorder = workers
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
    config: TuneConfig,
    budget: TrialBudget,
    workers: _Workers,
) -> None:
    """The search of a planned split (``config.task_trials``): each listed task on its own,
    up to the records it should have, one after the other with the job's cost model; tasks
    the split does not list get no search (their default schedule is measured)."""
    want = dict(config.task_trials or ())
    recorder = workers.recorder
    for i, task in enumerate(tasks):
        recorded = workers.db.count_records(task.mod, recorder.target)
        left = min(want.get(task.name, 0) - recorded, budget.left)
        if left <= 0:
            continue
        recorder.index = [i]
        try:
            per_round = trials_per_round(config.round_cap, left, 1)
            _tune_tasks([contexts[i]], [float(task.weight)], left, per_round, workers)
        finally:
            recorder.index = None


def _strategy(config: TuneConfig, per_round: int) -> Any:
    return ms.search_strategy.EvolutionarySearch(
        population_size=config.population_for(per_round),
        genetic_num_iters=config.search_generations,
    )


def _quiet_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(f"tunefarm.ms.{name}")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger
