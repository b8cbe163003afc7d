"""What a tuning job does (:class:`TuneConfig`), validated at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import tvm

from tuner.cost_model import check_name
from tuner.errors import TuneFarmError
from tuner.paired import MIN_PAIRS
from tuner.search.convergence import ConvergenceConfig
from tuner.search.population import search_population
from tuner.search.task import GENERATIONS, SIBLINGS
from tuner.targets import device_kind
from workers.config import MeasureConfig

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
    # a planned split (tuner.planner): task name -> the records it should have after the
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
    # a CPU task new to the database whose kernel is a matrix-vector product first measures
    # a known tiling of one (tuner.search.matvec: a column block per core, eight rows of the
    # weight at a time). Only with the pipelined search (not --search driver)
    matvec: bool = True
    # ... and one that is a matrix product (a prompt's projections), a known tiling of that
    # (tuner.search.gemm: a column band per core, half the vector registers accumulating)
    gemm: bool = True
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
    # tune --until-converged: each task stops once the gain it may still find falls below this
    # fraction of its best (tuner.search.convergence), its share going to the tasks still
    # improving; None: every task searches until --trials or --time-budget
    until_converged: float | None = None
    # at the end of the job, each task's ``retime`` best schedules by pooled median are timed
    # again, interleaved on the runner for ``retime_rounds`` rounds, every run recorded; a
    # challenger replaces the best only when faster with confidence (tuner.job.retime).
    # 0: off
    retime: int = 3
    retime_rounds: int = 5

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
        if self.until_converged is not None:
            ConvergenceConfig(gain=self.until_converged)  # its range checked
            if self.search == "driver" or self.transfer:
                raise TuneFarmError(
                    "--until-converged needs the pipelined search (--search auto, thread or "
                    "ray), not MetaSchedule's loop (--search driver or --transfer)"
                )
        if self.retime < 0:
            raise TuneFarmError(f"--retime must be at least 0 (got {self.retime})")
        if self.retime_rounds < MIN_PAIRS:
            raise TuneFarmError(
                f"re-timing rounds must be at least {MIN_PAIRS} (got {self.retime_rounds})"
            )
        if self.trials_per_iter < 1:
            raise TuneFarmError(
                f"trials per iteration must be at least 1 (got {self.trials_per_iter})"
            )


def measure_for(measure: MeasureConfig, target: tvm.target.Target) -> MeasureConfig:
    """``measure`` with the thread count host kernels are timed with: the target's
    ``num-cores`` (what its schedules parallelize for and ``bench`` runs with) unless set."""
    cores = target.attrs.get("num-cores")
    if measure.threads is not None or device_kind(target) == "cuda" or not cores:
        return measure
    return replace(measure, threads=int(cores))
