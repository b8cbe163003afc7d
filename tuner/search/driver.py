"""The driver's side of the task-parallel search.

Search actors (:class:`tuner.search.actor.SearchActor`) hold every task's search state; the
driver schedules tasks (:mod:`tuner.search.scheduler`), hands rounds to actors, routes the
candidates they return to the builders and runners, records the results and feeds them back.
While a round builds, the actors already generate the next ones (their cost models lag one
round). On a CPU target, where the search would share cores with the measurement, the
measurement waits for the rounds in flight; elsewhere (GPU, ARM) the search runs on throughout.
An actor that dies is replaced and its tasks rebuilt from the database: nothing is lost but the
round it was generating. On one node measuring its own CPU the same loop runs with the states in
one thread of the driver (``SearchPlan.host="thread"``): no actor process, the same pipelining.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import deque
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any

import ray
import tvm
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tvm.s_tir.meta_schedule.database import TuningRecord

from database import TargetKey, TuneFarmDatabase
from database.errors import error_summary
from tuner.bench.timing import bench_threads
from tuner.errors import TuneFarmError
from tuner.pipeline import Task
from tuner.search.actor import LocalTaskError, RemoteSearchActor, ThreadSearchActor
from tuner.search.compile_cost import unroll_of_json
from tuner.search.convergence import DEFAULT_GAIN, ConvergenceConfig, Estimate, estimate
from tuner.search.gemm import gemm_block
from tuner.search.matvec import matvec_block
from tuner.search.recorder import Recorder
from tuner.search.scheduler import TaskProgress, next_task
from tuner.search.task import GENERATIONS, Candidate, ModelSpec, TaskSpec, search_threads
from workers.builder import RayBuilder
from workers.ledger import Interrupted, TrialBudget
from workers.runner import RayRunner

log = logging.getLogger("tunefarm.search")

MAX_RESTARTS = 3  # per actor slot: a task whose actor keeps dying fails the job
# the most of a task's share of the job's trials its siblings-first round may take: one in 8
# (a transformer block at 8 trials per task ended at 1.15x the latency when 4 of the 8 went to
# the history's schedules; QKV and MLP at 64 per task measured 4 and gained)
SIBLING_SHARE = 8
HOSTS = ("ray", "thread")  # where the search states live: Ray actors, or a driver thread
# a search call that raised, from either host
TASK_ERRORS = (ray.exceptions.RayTaskError, LocalTaskError)


def _get(ref: Any, timeout: float | None = None) -> Any:
    """The result of a search call, from a Ray actor or a driver thread."""
    if isinstance(ref, Future):
        return ref.result(timeout=timeout)
    return ray.get(ref, timeout=timeout)


def _wait(refs: list[Any], num_returns: int, timeout: float | None) -> list[Any]:
    """``ray.wait`` over search calls of either host: those done, in ``refs``' order."""
    if refs and isinstance(refs[0], Future):
        when = FIRST_COMPLETED if num_returns < len(refs) else ALL_COMPLETED
        done, _ = futures_wait(refs, timeout=timeout, return_when=when)
        return [r for r in refs if r in done]
    return ray.wait(refs, num_returns=num_returns, timeout=timeout)[0]


def _plain(record_json: Any) -> Any:
    """A record's JSON form as plain Python data (it crosses to the actors)."""
    return json.loads(json.dumps(record_json, default=float))


def _kill(actor: Any) -> None:
    if isinstance(actor, ThreadSearchActor):
        actor.stop()
    else:
        ray.kill(actor)


def place_actors(n: int) -> list[tuple[str | None, int]]:
    """Where ``n`` search actors go: round-robin over the alive nodes that offer CPUs, most
    CPUs first, each with its threads (its node's CPUs shared among the actors there).
    ``(None, 1)`` each when Ray reports no such node."""
    nodes = sorted(
        (
            (int(node["Resources"].get("CPU", 0)), node["NodeID"])
            for node in ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) >= 1
        ),
        reverse=True,
    )
    if not nodes:
        return [(None, 1)] * n
    where = [nodes[k % len(nodes)] for k in range(n)]
    sharing = {nid: sum(1 for _, other in where if other == nid) for _, nid in nodes}
    return [(nid, search_threads(cpus, sharing[nid])) for cpus, nid in where]


def actor_options(node_id: str | None, soft: bool = True) -> dict[str, Any]:
    """Ray options that put a search actor on ``node_id`` (``soft``: anywhere if it is gone)."""
    if node_id is None:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=soft)}


@dataclass(frozen=True)
class SearchPlan:
    """How the actor search runs; validated at construction."""

    per_round: int
    population: int
    generations: int = GENERATIONS  # the evolutionary search's genetic_num_iters
    seed: int | None = None
    overlap_measure: bool = False  # keep generating while candidates are measured
    actors: int | None = None  # None: one per task, at most the cluster's CPUs
    job_id: int | None = None  # names the actors (tunefarm-search-<job>-<slot>)
    host: str = "ray"  # "thread": every state in one thread of the driver (no actor process)
    # a task without records first measures up to this many of its kernel's best schedules at
    # other buckets, refitted (at most a round): TaskSpec.seeds
    siblings: int = 0
    # before each later round, the task's kernel's new best at the nearest other bucket
    exchange: bool = False
    # pick each round by the model's order per expected compile second (TaskSpec.compile_aware)
    compile_aware: bool = False
    # tune --until-converged: a task whose expected gain falls below this gets no more rounds
    # (tuner.search.convergence); None: every task searches until the budget is spent
    converge_gain: float | None = None
    # a CPU task without records that is a matrix-vector product first measures a known
    # tiling of one (tuner.search.matvec): a decoder's projections at one token
    matvec: bool = False
    # ... and one that is a matrix product, a known tiling of that (tuner.search.gemm): the
    # projections of a prompt's tokens
    gemm: bool = False

    def __post_init__(self) -> None:
        if self.host not in HOSTS:
            raise TuneFarmError(f"unknown search host {self.host!r}; valid: {', '.join(HOSTS)}")
        if self.per_round < 1 or self.population < 2 or self.generations < 1:
            raise TuneFarmError(
                "a search round needs at least 1 candidate, a population of 2 and 1 generation"
            )
        if self.siblings < 0:
            raise TuneFarmError(f"siblings must be at least 0 (got {self.siblings})")
        if self.actors is not None and self.actors < 1:
            raise TuneFarmError(f"search actors must be at least 1 (got {self.actors})")


@dataclass
class SearchStats:
    """What the actor search did, for the job summary."""

    actors: int = 0
    nodes: int = 0
    rounds: int = 0
    restarts: int = 0
    exchanged: int = 0  # seeds the bucket exchange sent mid-job (set by finish)
    # the siblings-first rounds: tasks that began with the history's schedules at other
    # buckets of their kernel, and how many such schedules they were sent in all
    sibling_tasks: int = 0
    siblings: int = 0
    matvec_tasks: int = 0  # tasks whose first round began with tuner.search.matvec's tilings
    gemm_tasks: int = 0  # ... with tuner.search.gemm's
    # a compile-aware search's prior: tasks that began with their family's recorded builds
    prior_tasks: int = 0
    actor_busy_sec: float = 0.0  # summed over actors: the search work done off the driver
    wait_sec: float = 0.0  # driver time blocked on actors
    events: list[str] = field(default_factory=list)


class ActorSearch:
    """Task-parallel search of ``tasks`` on Ray actors, recording through ``recorder``."""

    def __init__(
        self,
        tasks: list[Task],
        target: tvm.target.Target,
        db: TuneFarmDatabase,
        builder: RayBuilder,
        runner: RayRunner,
        model: ModelSpec,
        plan: SearchPlan,
        max_trials: int,
    ) -> None:
        self.tasks, self.target, self.db = tasks, target, db
        self.builder, self.runner = builder, runner
        self.plan, self.max_trials = plan, max_trials
        self.recorder: Recorder | None = None  # from run()
        self.budget = TrialBudget(0)
        self.stats = SearchStats()
        self._target_json = TargetKey.of(target).json
        if plan.host == "thread":  # one thread searching beside the driver, on this node
            self._model_ref: Any = model
            self.n_actors = 1
            self._places = [(None, search_threads())]
        else:
            self._model_ref = ray.put(model)
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            n = plan.actors or min(len(tasks), cpus)
            self.n_actors = max(1, min(n, len(tasks)))
            self._places = place_actors(self.n_actors)
        self.home = [i % self.n_actors for i in range(len(tasks))]  # task -> actor slot
        self.actors: list[Any] = [None] * self.n_actors
        self._generation = [0] * self.n_actors
        self.progress = [TaskProgress(weight=float(t.weight), want=max_trials) for t in tasks]
        self.convergence = ConvergenceConfig(gain=plan.converge_gain or DEFAULT_GAIN)
        self._ready_refs: list[Any] = []
        self._told: list[Any] = []  # results sent to the actors, their refits maybe running
        # the bucket exchange: seeds each task was sent (by trace), and how many mid-job
        self._seeded: list[set[str]] = [set() for _ in tasks]
        self._priced: set[int] = set()  # tasks whose compile-aware search began with a prior
        self._exchanged = [0] * len(tasks)

    # ------------------------------------------------------------------ actors
    def start(self) -> None:
        """Create the actors and build every task's state (asynchronously: where the search
        has cores of its own, the states build while the job measures its baselines; where
        it shares the measuring cores, the job waits for them first: :meth:`wait_ready`)."""
        for slot in range(self.n_actors):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        node, threads = self._places[slot]
        if self.plan.host == "thread":
            actor: Any = ThreadSearchActor(self._target_json, self._model_ref, threads)
        else:
            opts = actor_options(node)
            if self.plan.job_id is not None:
                name = f"tunefarm-search-{self.plan.job_id}-{slot}-{self._generation[slot]}"
                opts["name"] = name
            actor = RemoteSearchActor.options(**opts).remote(
                self._target_json, self._model_ref, threads
            )
        self.actors[slot] = actor
        for task in (i for i, home in enumerate(self.home) if home == slot):
            self._ready_refs.append(actor.add.remote(self._spec(task)))

    def _spec(self, task: int) -> TaskSpec:
        mod = self.tasks[task].mod
        workload = self.db.commit_workload(mod)
        records = [
            _plain(r.as_json())
            for r in self.db.get_top_k(workload, self.plan.population)
            if r.run_secs
        ]
        seeds: list[Any] = []
        if not records and self.plan.siblings:
            # a head start, not the task's search: at most a round, and at most one in
            # SIBLING_SHARE of its share of the job's trials
            limit = min(self.plan.siblings, self.plan.per_round, self._sibling_cap())
            seeds = self._new_seeds(task, self.db.siblings(mod, limit))
            if seeds:  # a restarted actor's task gets none it was sent already
                self.stats.sibling_tasks += 1
                self.stats.siblings += len(seeds)
        tiling = 0
        if not records and self.target.kind.name == "llvm":
            if self.plan.matvec and matvec_block(mod["main"]) is not None:
                self.stats.matvec_tasks += 1
                tiling = bench_threads(self.target)
            elif self.plan.gemm and gemm_block(mod["main"]) is not None:
                self.stats.gemm_tasks += 1
                tiling = bench_threads(self.target)
        seed = self.plan.seed
        return TaskSpec(
            task_id=task,
            name=self.tasks[task].name,
            mod_json=tvm.ir.save_json(mod),
            records=records,
            max_trials=max(1, self.max_trials),
            per_round=self.plan.per_round,
            population=self.plan.population,
            generations=self.plan.generations,
            seed=-1 if seed is None or seed < 0 else seed + task,
            seeds=tuple(seeds),
            compile_aware=self.plan.compile_aware,
            compile_prior=self._compile_prior(task, mod) if self.plan.compile_aware else (),
            tiling_threads=tiling,
        )

    def _compile_prior(self, task: int, mod: Any) -> tuple[tuple[int, float], ...]:
        """What the database's builds of ``mod``'s kernel family took, by unroll limit."""
        prior = tuple((unroll_of_json(t), sec) for t, sec in self.db.family_builds(mod))
        if prior:
            self._priced.add(task)
            self.stats.prior_tasks = len(self._priced)
        return prior

    def _sibling_cap(self) -> int:
        """At most one in SIBLING_SHARE of a task's share of the job's trials."""
        return max(1, self.max_trials // max(1, len(self.tasks)) // SIBLING_SHARE)

    def _new_seeds(self, task: int, traces: list[Any]) -> list[Any]:
        """``traces`` as seed records of ``task``, those it was already sent dropped."""
        if not traces:
            return []
        workload = self.db.commit_workload(self.tasks[task].mod)
        out = []
        for trace in traces:
            rec = _plain(TuningRecord(trace, workload, None, self.target, None).as_json())
            key = json.dumps(rec[0], sort_keys=True)
            if key not in self._seeded[task]:
                self._seeded[task].add(key)
                out.append(rec)
        return out

    def _exchange(self, task: int, slot: int) -> None:
        """The bucket exchange: before a task's next round, its kernel's best schedule at the
        nearest other bucket (found by this job or in the history), refitted, if the task was
        not sent it yet; one a round, at most :meth:`_sibling_cap` over the job."""
        if not self.plan.exchange or self._exchanged[task] >= self._sibling_cap():
            return
        if self.progress[task].sent == 0:  # the first round has the spec's seeds
            return
        seeds = self._new_seeds(task, self.db.siblings(self.tasks[task].mod, 1))
        if seeds:
            self._exchanged[task] += len(seeds)
            self.actors[slot].seed.remote(task, seeds)  # in order, before its next generate

    def _restart(self, slot: int, why: str) -> None:
        self._generation[slot] += 1
        self.stats.restarts += 1
        if self._generation[slot] > MAX_RESTARTS:
            raise TuneFarmError(f"search actor {slot} died {self._generation[slot]} times: {why}")
        note = f"search actor {slot} died ({why}); restarted, its tasks rebuilt from the database"
        self.stats.events.append(note)
        log.warning(note)
        with contextlib.suppress(Exception):  # already gone
            _kill(self.actors[slot])
        self._spawn(slot)

    def wait_ready(self) -> None:
        """Wait until every task's state is built (a task the search cannot start is a clear
        error). The job calls it before timing anything on cores the search shares."""
        try:
            for ref in self._ready_refs:
                _get(ref)
        except TASK_ERRORS as err:
            raise TuneFarmError(f"a task's search could not start: {error_summary(err)}") from err
        except ray.exceptions.RayActorError:
            pass  # a dead actor is restarted at its first generate
        self._ready_refs = []

    # ------------------------------------------------------------------ loop
    def run(
        self,
        recorder: Recorder,
        budget: TrialBudget,
        want: list[int] | None = None,
        baselines: list[float | None] | None = None,
    ) -> None:
        """Search until ``budget`` is spent or every task's search is exhausted, recording
        through ``recorder``. ``want``: candidates each task
        may be sent (a planned split); ``baselines``: the untuned latencies, for the scheduler."""
        self.recorder, self.budget = recorder, budget
        for i, progress in enumerate(self.progress):
            progress.want = want[i] if want is not None else budget.left
            progress.baseline_sec = baselines[i] if baselines is not None else None
        self.wait_ready()
        gen: dict[Any, tuple[int, int, int]] = {}  # ref -> (task, actor slot, generation)
        ready: deque[tuple[int, list[Candidate]]] = deque()
        queued: set[int] = set()  # tasks with a round generating or ready
        while self.budget.left > 0:
            self._submit(gen, queued)
            self._collect(gen, ready, queued, block=not ready)
            if not ready:
                if not gen:  # nothing in flight: a restarted actor's tasks go again, or done
                    self._submit(gen, queued)
                    if not gen:
                        break
                continue
            task, cands = ready.popleft()
            queued.discard(task)
            if self.progress[task].converged:  # generated before it converged: not measured
                self.progress[task].sent -= len(cands)
                continue
            self._submit(gen, queued)  # the actors generate while this round builds
            self._measure(task, cands, gen, ready, queued)
        if self.budget.closed_by == "user":  # Ctrl-C while waiting on the search: unwind
            raise Interrupted("the job was interrupted")  # as the builder does at its next batch

    def _submit(self, gen: dict[Any, tuple[int, int, int]], queued: set[int]) -> None:
        busy = {slot for _, slot, _ in gen.values()}
        for slot in range(self.n_actors):
            if slot in busy:
                continue
            mine = {i for i, home in enumerate(self.home) if home == slot and i not in queued}
            task = next_task(self.progress, mine)
            if task is None:
                continue
            self._exchange(task, slot)
            ref = self.actors[slot].generate.remote(task)
            gen[ref] = (task, slot, self._generation[slot])
            queued.add(task)

    def _collect(
        self,
        gen: dict[Any, tuple[int, int, int]],
        ready: deque[tuple[int, list[Candidate]]],
        queued: set[int],
        block: bool,
        every: bool = False,
    ) -> None:
        if not gen:
            return
        start = time.perf_counter()
        refs = list(gen)
        want = len(refs) if every else 1
        done = _wait(refs, want if block else len(refs), None if block else 0)
        self.stats.wait_sec += time.perf_counter() - start
        for ref in done:
            task, slot, generation = gen.pop(ref)
            try:
                cands = _get(ref)
            except ray.exceptions.RayActorError as err:
                queued.discard(task)
                if generation == self._generation[slot]:
                    self._restart(slot, error_summary(err))
                continue
            except TASK_ERRORS as err:  # the search itself failed: a bug
                raise TuneFarmError(
                    f"search of {self.tasks[task].name} failed: {error_summary(err)}"
                ) from err
            if cands is None:
                self.progress[task].exhausted = True
                queued.discard(task)
                continue
            cands = cands[: max(0, self.progress[task].want - self.progress[task].sent)]
            self.progress[task].sent += len(cands)
            ready.append((task, cands))

    def _measure(
        self,
        task: int,
        cands: list[Candidate],
        gen: dict[Any, tuple[int, int, int]],
        ready: deque[tuple[int, list[Candidate]]],
        queued: set[int],
    ) -> None:
        if self.budget.closed_by == "time":  # the time budget is up: the round is dropped
            return
        built = self.builder.build_json(
            [(c.candidate_hash, c.mod_json) for c in cands], self.target
        )
        if not self.plan.overlap_measure:  # the search would share the measuring cores
            self._collect(gen, ready, queued, block=True, every=True)
            if self._told:  # and so would a cost model's refit
                _wait(self._told, len(self._told), None)
                self._told = []
        if self.budget.closed_by == "time":
            return
        recorder = self.recorder
        assert recorder is not None  # set by run()
        futures = self.runner.run_json(
            [(b.artifact_path, c.args_info_json) for b, c in zip(built, cands, strict=True)],
            best_sec=recorder.best_sec(task),
            group=self.tasks[task].name,
        )
        results = [f.result() for f in futures]
        # what the builds took, for a compile-aware pick (before the recorder takes the
        # ledger's entries); nothing to look up for a search that does not use them
        build_secs = self._build_secs(built) if self.plan.compile_aware else None
        resumed = recorder.resumed
        recorder.record(
            task, lambda i: (cands[i].trace_json, cands[i].args_info_json), built, results
        )
        progress = self.progress[task]
        # a candidate the database had measured (in an earlier job or round) is no trial:
        # it does not count against the task's share (a planned stage 2 ended at 29 of its
        # 32 trials, three tasks one short each)
        hits = recorder.resumed - resumed
        progress.refund(hits, len(cands))
        progress.rounds += 1
        self._judge(progress, recorder.best_sec(task), results, len(cands) - hits)
        self.stats.rounds += 1
        told = [
            (
                [float(s) for s in r.run_secs] if r.run_secs and r.error_msg is None else None,
                r.error_msg,
            )
            for r in results
        ]
        slot = self.home[task]
        # in order with its next calls
        rows = self.actors[slot].notify.remote(task, told, build_secs)
        self._told.append(rows)
        for other, actor in enumerate(self.actors):  # every copy of the model learns from it
            if other != slot:
                self._told.append(actor.absorb.remote(rows))

    def _judge(
        self, progress: TaskProgress, best_sec: float | None, results: list[Any], new: int
    ) -> None:
        """A task's measured round in its history, its gain still available estimated; with
        ``plan.converge_gain``, a task below it is converged (sent no more rounds)."""
        before = next((b for b in reversed(progress.best) if math.isfinite(b)), math.inf)
        progress.measured(best_sec, new)
        timed = [[float(s) for s in r.run_secs] for r in results if r.run_secs and not r.error_msg]
        fastest = min(timed, key=lambda secs: sum(secs) / len(secs), default=None)
        if fastest is not None and sum(fastest) / len(fastest) < before:  # the round's new best
            progress.samples = tuple(fastest)
        progress.estimate = estimate(progress.history(), self.convergence)
        if self.plan.converge_gain is not None and progress.estimate.converged:
            progress.converged = True
            progress.converged_at = progress.tried[-1]

    @property
    def converged(self) -> bool:
        """Every task converged (or its search exhausted), at least one converged."""
        done = all(p.converged or p.exhausted for p in self.progress)
        return done and any(p.converged for p in self.progress)

    def estimates(self) -> list[Estimate | None]:
        """Each task's latest estimate of the gain still available (None: no round measured)."""
        return [p.estimate for p in self.progress]

    def _build_secs(self, built: list[Any]) -> list[float | None]:
        """What each of a round's candidates took to compile (None: not built by this round,
        e.g. measured before, or dropped)."""
        out: list[float | None] = []
        for b in built:
            entry = self.builder.ledger.get(b.artifact_path)
            build = entry.build if entry is not None else None
            fresh = entry is not None and not entry.cached and not entry.dropped
            out.append(build.build_sec if fresh and build and build.build_sec > 0 else None)
        return out

    # ------------------------------------------------------------------ end
    def finish(self) -> dict[Any, Any]:
        """Collect the actors' figures and measured features, then stop them."""
        features: dict[Any, Any] = {}
        nodes = set()
        for actor in self.actors:
            try:
                stats = _get(actor.stats.remote(), timeout=60)
                features.update(_get(actor.features.remote(), timeout=60))
            except (ray.exceptions.RayError, LocalTaskError, TimeoutError) as err:
                log.info("search actor lost at the end: %s", error_summary(err))
                continue
            nodes.add(stats["node"])
            self.stats.actor_busy_sec += stats["busy_sec"]
        self.stats.actors = self.n_actors
        self.stats.exchanged = sum(self._exchanged)
        self.stats.nodes = len(nodes)
        return features

    def shutdown(self) -> None:
        for actor in self.actors:
            if actor is not None:
                _kill(actor)
        self.actors = [None] * self.n_actors


__all__ = ["HOSTS", "ActorSearch", "SearchPlan", "SearchStats", "actor_options", "place_actors"]
