"""One task's search state, driven round by round from outside (a search actor).

The state is MetaSchedule's own: a ``TuneContext`` with its design spaces and evolutionary
search, a ``MemoryDatabase`` holding the task's best records (seeded by the driver from the
team database, then every result this search is told of), and the copy of the job's cost model
its actor's tasks share. Candidates and results cross process boundaries as
plain data, so a state can be rebuilt anywhere from the database alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.s_tir.meta_schedule.runner import RunnerResult

from database import shash_of
from tuner.search.compile_cost import OVERSAMPLE, CompileCosts, pick, unroll_of
from tuner.search.gemm import gemm_traces, register_blocks
from tuner.search.matvec import matvec_traces

Rows = tuple[Any, Any, list[str]]  # cost-model training rows: features, seconds, workload keys


@dataclass(frozen=True)
class Candidate:
    """A candidate schedule as plain data: what the builder, runner and recorder need."""

    candidate_hash: str  # structural hash of the scheduled module
    mod_json: str  # the scheduled module (tvm.ir.save_json)
    trace_json: Any  # MetaSchedule's trace, as a record stores it
    args_info_json: Any  # the kernel's arguments, as a record stores them


@dataclass(frozen=True)
class ModelSpec:
    """The job's cost model, to be rebuilt in each search actor: by name, plus TuneFarm's
    fitted state (:meth:`tuner.cost_model.model.TunefarmModel.state`)."""

    name: str
    seed: int | None = None
    state: dict[str, Any] | None = None

    def create(self, threads: int) -> Any:
        """A fresh copy, its random stream seeded with the job's seed."""
        if self.name == "tunefarm":
            from tuner.cost_model.model import TunefarmModel

            if self.state is None:
                return TunefarmModel(seed=self.seed)
            return TunefarmModel.from_state(self.state, seed=self.seed)
        if self.name == "xgb":
            return ms.CostModel.create("xgb", num_tuning_cores=threads)
        return ms.CostModel.create("random", seed=self.seed)


# Generations the evolutionary search evolves its population per round (MetaSchedule's
# genetic_num_iters, 4 there). Each generation's whole population is scored by the cost model,
# i.e. featurized: with a trained model that is most of a round. Measured (time-to-quality,
# dynamic MLP and QKV, 5 seeds, 16 trials per task, cold and warm): 2 generations took 0.79-0.93x
# the wall time of 4 at the same or better final latency on the MLP, within noise on QKV.
GENERATIONS = 2
# How many of the history's best schedules of a kernel at its other buckets (refitted) a warm
# job's task measures first (tuner.job.TuneConfig.siblings).
SIBLINGS = 4


@dataclass(frozen=True)
class TaskSpec:
    """What a search state is built from."""

    task_id: int
    name: str
    mod_json: str
    records: list[Any]  # the task's best records so far, TuningRecord.as_json() each
    max_trials: int
    per_round: int
    population: int
    seed: int  # -1: random
    generations: int = GENERATIONS  # the evolutionary search's genetic_num_iters
    # the team's best schedules of this kernel at other buckets, refitted to this one
    # (TuningRecord.as_json() each, without a measurement): the first round measures them
    seeds: tuple[Any, ...] = ()
    # ask the evolutionary search for OVERSAMPLE x a round and measure the round's worth with
    # the most of the model's rank per expected compile second (tuner.search.compile_cost);
    # off (the default): the model's first per_round, as MetaSchedule measures them
    compile_aware: bool = False
    # a compile-aware search's prior: what its kernel family's recorded builds took,
    # (unroll limit, seconds) each (CompileCosts.prior), so its first round is priced too
    compile_prior: tuple[tuple[int, float], ...] = ()
    # > 0: a task without records that is a matrix-vector or a matrix product measures the
    # known tilings of one for this many cores first (tuner.search.matvec, tuner.search.gemm),
    # ahead of the seeds
    tiling_threads: int = 0


class TaskSearch:
    """The search of one task: :meth:`generate` a round, :meth:`notify` its results."""

    def __init__(self, spec: TaskSpec, target: tvm.target.Target, model: Any, threads: int) -> None:
        self.spec = spec
        self.target = target
        self.model = model
        mod = tvm.ir.load_json(spec.mod_json)
        self.db = ms.database.MemoryDatabase()
        self.workload = self.db.commit_workload(mod)
        for rec in spec.records:
            self.db.commit_tuning_record(TuningRecord.from_json(rec, self.workload))
        self.ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=ms.search_strategy.EvolutionarySearch(
                population_size=spec.population, genetic_num_iters=spec.generations
            ),
            task_name=spec.name,
            rand_state=spec.seed,
            num_threads=threads,
        ).clone()
        spaces = self.ctx.generate_design_space()
        self.ctx.pre_tuning(
            max_trials=spec.max_trials,
            num_trials_per_iter=spec.per_round * (OVERSAMPLE if spec.compile_aware else 1),
            design_spaces=spaces,
            database=self.db,
            cost_model=model,
        )
        self._pending: list[list[Any]] = []  # generated rounds not yet notified, oldest first
        self._sent: set[str] = set()  # every candidate generated, by module hash
        # seeds not generated yet, by module hash: the spec's (the first round) and those
        # sent mid-job (:meth:`seed`, leading the next round)
        self._first = self._seeded(spec.seeds, set())
        if spec.tiling_threads and not spec.records:
            func, threads = mod["main"], spec.tiling_threads
            known = matvec_traces(func, spaces, threads) or gemm_traces(
                func, spaces, threads, register_blocks(target)
            )
            self._first = {**self._candidates(known, set()), **self._first}
        self._extra: dict[str, Any] = {}
        # the task's compile seconds by unroll limit, from the family's recorded builds first
        self.costs = CompileCosts.from_prior(spec.compile_prior)

    def _seeded(self, seeds: tuple[Any, ...], skip: set[str]) -> dict[str, Any]:
        """The seeds as measure candidates by module hash, post-processed as the search's own
        are (distinct modules only, none in ``skip`` or already generated; a seed a
        post-processor rejects is dropped)."""
        traces = []
        for rec in seeds:
            try:
                traces.append(TuningRecord.from_json(rec, self.workload).trace)
            except Exception:  # not a record of this kernel: not a candidate
                continue
        return self._candidates(traces, skip)

    def _candidates(self, traces: list[Any], skip: set[str]) -> dict[str, Any]:
        """``traces`` replayed and post-processed as the search's own candidates are."""
        out: dict[str, Any] = {}
        args = ms.arg_info.ArgInfo.from_entry_func(self.workload.mod, remove_preproc=True)
        for trace in traces:
            try:
                sch = tvm.s_tir.Schedule(self.workload.mod)
                trace.apply_to_schedule(sch, remove_postproc=True)
                sch.enter_postproc()
                if not all(p.apply(sch) for p in self.ctx.space_generator.postprocs):
                    continue
            except Exception:  # a trace this kernel cannot replay: not a candidate
                continue
            key = shash_of(sch.mod)
            if key not in out and key not in skip and key not in self._sent:
                out[key] = ms.MeasureCandidate(sch, args)
        return out

    def seed(self, seeds: list[Any]) -> int:
        """Schedules to measure in the next round, before the search's own (the kernel's new
        best at another bucket, refitted: :meth:`tuner.search.driver.ActorSearch` sends them
        mid-job); post-processed as :meth:`_seeded`, those already generated or queued
        dropped. Returns how many were kept."""
        kept = self._seeded(tuple(seeds), set(self._extra))
        self._extra.update(kept)
        return len(kept)

    def generate(self) -> list[Candidate] | None:
        """The next round's candidates; None when the search has nothing more to offer. The
        spec's seeds come first: one round of at most ``per_round`` of them. Seeds sent since
        (:meth:`seed`) lead the next round, the search's own candidates fill the rest."""
        per_round = self.spec.per_round
        if self._first:
            picked, self._first = dict(list(self._first.items())[:per_round]), {}
        else:
            picked, self._extra = dict(list(self._extra.items())[:per_round]), {}
            found = self.ctx.generate_measure_candidates() if len(picked) < per_round else []
            if found is None and not picked:
                return None
            fresh: dict[str, Any] = {}
            for cand in found or []:
                key = shash_of(cand.sch.mod)
                if key not in picked:  # a seed's twin: the seed
                    fresh.setdefault(key, cand)
            keys = list(fresh)
            costs = [
                self.costs.expect(unroll_of(fresh[k].sch.trace))
                if self.spec.compile_aware
                else None
                for k in keys
            ]
            for i in pick(costs, per_round - len(picked)):
                picked[keys[i]] = fresh[keys[i]]
        self._pending.append(list(picked.values()))
        out = []
        for key, cand in picked.items():
            trace, _, _, args = TuningRecord(
                cand.sch.trace, self.workload, None, self.target, cand.args_info
            ).as_json()
            self._sent.add(key)
            out.append(Candidate(key, tvm.ir.save_json(cand.sch.mod), trace, args))
        return out

    def notify(
        self,
        results: list[tuple[list[float] | None, str | None]],
        build_secs: list[float | None] | None = None,
    ) -> Rows | None:
        """Results of the oldest round not yet notified, in its order: (run seconds or None,
        error or None) each, and what each took to compile (None: not built, e.g. measured
        before). Valid ones become records of the search's database; the search and the cost
        model hear all of them, the compile costs (:class:`CompileCosts`) every build. Returns
        the training rows the cost model took (features, seconds, workload keys) for the other
        tasks' copies (None: a stock model)."""
        if not self._pending:
            raise ValueError("results for no round: every generated round was notified")
        cands = self._pending[0]
        if len(cands) != len(results):
            raise ValueError(f"{len(results)} results for a round of {len(cands)} candidates")
        self._pending.pop(0)
        for cand, sec in zip(cands, build_secs or [], strict=False):
            if sec:
                self.costs.add(unroll_of(cand.sch.trace), sec)
        runner_results = []
        for cand, (secs, err) in zip(cands, results, strict=True):
            runner_results.append(RunnerResult(secs if err is None else None, err))
            if err is None and secs:
                self.db.commit_tuning_record(
                    TuningRecord(cand.sch.trace, self.workload, secs, self.target, cand.args_info)
                )
        self.ctx.notify_runner_results(cands, runner_results)
        self.model.update(self.ctx, cands, runner_results)
        return getattr(self.model, "last_rows", None)


def search_threads(cpus: int | None = None, sharers: int = 1) -> int:
    """Threads for one of ``sharers`` searches on a node of ``cpus`` cores (default: this one)."""
    return max(1, (cpus or os.cpu_count() or 1) // max(1, sharers))
