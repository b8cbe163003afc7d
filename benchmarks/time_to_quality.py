"""Time to a fast model (issue 15): the model's best-so-far latency against wall-clock time.

For each workload (a model with a symbolic variable, tuned at fixed buckets) and each seed, each
variant tunes the same bucket tasks with the same trial budget, round size and measurement
settings, from nothing:

- ``tunefarm``: ``tuner.job.tune`` on the embedded default (local Ray, a fresh SQLite file), its
  evolutionary search's population sized from the round (``tuner.job.search_population``);
- ``tunefarm-popN`` (``-pop512``, ``-pop256``, ``-pop128``, ``-pop64``, and
  ``tunefarm-warm-pop256``, ``-pop128``, ``-pop64``): the same with a fixed population of N
  whatever the round. A timed run's rounds are stock's (8 candidates for 2 or 4 tasks of 16
  trials), where the sized population is 128 (16 per candidate): ``-pop128`` is then the
  default and ``-pop64`` half of it (results files before commit 2e9ab2e were made at 32
  per candidate, where ``-pop256`` was the default). Each TuneFarm run records
  the population and round it searched with (``search`` in the results);
- ``tunefarm-warm``: the same job into a copy of a team's history database (see below): its
  cost model starts from the history (a base model trained on it, then snapshot) and the
  records of the same kernels at other buckets weigh in; each task's first round measures
  the history's best schedules of its kernel at other buckets, refitted to its shape
  (``TuneConfig.siblings``);
- ``tunefarm-warm-model``: the warm job as it was before the siblings (results files before
  2026-11-28): the history's cost model only, no task measuring its kernel's best schedules
  at other buckets first (``TuneConfig.siblings=0``);
- ``tunefarm-exchange``: the cold job with the bucket exchange (``tune --exchange``: a task's
  later rounds measure its kernel's new best at the nearest other bucket, refitted). In
  ``2026-11-28b-vm-time-to-quality-exchange.json`` the exchange was the default:
  ``tunefarm`` there is ``tunefarm-exchange``, and ``tunefarm-noexchange`` today's default;
- ``tunefarm-warm-transfer``: the warm job with ``--transfer``, each bucket's search also
  seeded with the other buckets' best schedules refitted to its shape;
- ``tunefarm-g4``, ``tunefarm-warm-g4``: the cold and warm jobs with MetaSchedule's 4
  generations of the evolutionary search per round instead of TuneFarm's 2
  (``tuner.search.task.GENERATIONS``; each generation is scored by the cost model, i.e. the
  whole population featurized). Results files of 2026-11-25 were made when 4 was the
  default: their ``tunefarm``/``tunefarm-warm`` ran 4 generations and ``-g2`` 2;
- ``tunefarm-aware``, ``tunefarm-warm-aware``: the cold and warm jobs picking each round's
  candidates by the cost model's rank per expected compile second (``TuneConfig.compile_aware``:
  twice a round asked of the search, the expected seconds learnt from the task's builds by
  unroll limit). In ``2026-11-29h-vm-time-to-quality-mlp-compile-aware.json`` the aware pick
  was the default: ``tunefarm`` and ``tunefarm-warm`` there are these, ``tunefarm-blind`` and
  ``tunefarm-warm-blind`` today's default;
- ``stock``: stock MetaSchedule, ``ms.tune.tune_tasks`` over the same tasks (gradient
  scheduler, LocalBuilder/LocalRunner, XGB cost model, population 512, an in-memory
  database), the untuned module's tasks as ``tune_relax`` would extract them per bucket.
- ``stock-long``: the same with :data:`WALL_TRIALS_FACTOR` times the trials, after the others
  in each seed. Stock's own run seldom reaches 90% of the best any run found within its
  trials, so its time to that level is only a lower bound (its whole wall time) and a ratio
  to it an upper bound; ``stock-long`` measures when stock gets there given as long as a
  timed TuneFarm job may search (the ``to 90% vs stock-long`` table). Its runs count for
  the best latency any run found, like every other run's.

The history of a workload (:data:`HISTORIES`) holds other shapes and other kernels, never the
measured buckets themselves: the same model tuned at other buckets and another model, each by a
cold TuneFarm job of ``--trials-per-task`` per task, built before each seed (its cold jobs
seeded by the seed) and outside every variant's wall time (a teammate's earlier work). Each
warm run tunes into its own copy of it. One history's luck then weighs on one seed's warm runs:
with one history for the run (``--no-history-per-seed``, what every run before 2026-12-02
did), a history whose best schedules refit poorly held back all five warm seeds alike (QKV's
warm finals 1.13x stock's latency against 0.81x with a history per seed, the same hour).
``--history-trials-per-task`` sets how deep the teammate tuned (default: as deep as
``--trials-per-task``; with ``--budget wall`` a TuneFarm job ends at up to
:data:`WALL_TRIALS_FACTOR` times that, so ``--history-trials-per-task 64`` at 16 is a teammate
who ran the same job at other shapes).

The model's latency at a moment is the sum over tasks of calls x the task's best measured time
so far, defined once every task has a measurement (TuneFarm measures every task's default
schedule first; stock reaches every task in its first round). Wall time counts from the call
that starts the job (TuneFarm's Ray start and task extraction included). Reported per
workload: the wall time at which each run reached 90% and 95% of the best latency any run of
any variant found (``best / latency >= 0.9``), the wall time at which it had stock's median
final latency (what the user would otherwise get; against stock's median wall time: how much
sooner), the wall time at which it reached 90% of the best latency of its own and stock's runs
only, against stock's time to the same level (head to head: a warm variant's history can set
the first figure's bar where no cold run gets in stock's time), its final latency and wall
time, the model
latency of its final schedules re-timed right after its pair side by side with the pair's other
runs (one process, the same settings, interleaved: :func:`retime`; each job's own measurements
were taken under whatever load it ran with, and stock's runner is another process), as medians with
their interquartile range over seeds, the ratios of medians to stock's, and one PNG of the
median curve with its interquartile band per variant. A ratio whose runs spread by more than
25% is marked noisy. Usage::

    python -m benchmarks time-to-quality [--workloads mlp qkv transformer] [--seeds 4]
        [--trials-per-task 64] [--variants tunefarm tunefarm-warm stock [stock-long]]
        [--budget wall|trials]
        [--history-trials-per-task 64] [--no-history-per-seed] [--resume PAIRS.jsonl]
    python -m benchmarks time-to-quality --summarize RESULTS.json [--report REPORT.md]

**Paired seeds.** Each seed is a pair: the variants of one seed run back to back, their order
alternating from pair to pair (:func:`pair_order`: at a wall-time budget stock runs first,
its wall time being the others' budget, and the TuneFarm variants alternate), then the pair's
final schedules are re-timed side by side and the pair is appended, as one line, to the pairs
file (``<results>.pairs.jsonl``, with the host, its CPU model and the git commit): a run killed
midway keeps its finished pairs. ``--resume PAIRS.jsonl`` appends to an existing pairs file, on
any host, with that file's protocol settings (:data:`PROTOCOL`) and the seeds after its last.
``python -m benchmarks verdicts`` (:mod:`benchmarks.verdict`) judges the targets from the pairs,
each pair compared only within itself. The defaults (``--workloads mlp --seeds 4 --budget wall
--trials-per-task 64``) fit about an hour on a 2-core machine: a pair of the MLP is stock's
64 trials a task (about 2.5 min), each TuneFarm variant as long, the warm run's history (two
cold jobs) and the re-timing, 12-15 min in all. For QKV ``--seeds 8`` fits the hour; the
transformer block takes ``--trials-per-task 8 --seeds 1`` (stock's run alone is 12 min).

``--budget trials`` gives every variant the same trials. ``--budget wall`` (the default) gives
every variant the same wall-clock time instead: in each seed stock runs first, with the
trials; each TuneFarm variant then tunes with ``tune --time-budget`` set to that stock run's
wall time, :data:`WALL_TRIALS_FACTOR` times the trials and the round size its trials run
would have (at most ``tuner.job.TIMED_ROUND_CAP``), so the final latencies compare at equal
wall time (a TuneFarm job ends a few
seconds after its budget: it measures the range kernels the build uses).

The results file (this run's pairs, summarized) is rewritten after every pair (marked
``partial`` until the last).

The report is a section of ``--report`` (``docs/performance.md`` by default, which ``make
bench``'s suite writes first), between :data:`BEGIN` and :data:`END`: the rest of the file
is kept. ``docs/time-to-quality.md`` states the targets and the runs behind them. The short form
in ``make bench`` is ``--workloads mlp --seeds 3 --trials-per-task 8``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common import machine_header, results_path
from benchmarks.verdict import add_pair_args, alternate, append_pair, next_seed, pair_header, resume

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS: dict[str, tuple[str, dict[str, list[int]]]] = {
    "qkv": ("examples/qkv_dynamic.py", {"M": [8, 128]}),
    "mlp": ("examples/mlp_dynamic.py", {"b": [8, 64]}),
    "transformer": ("examples/transformer_block_dynamic.py", {"s": [16, 64]}),
}
# The history a warm run starts from, per workload: (model, buckets) tuned by cold jobs.
# Other shapes of the same kernels and another model; never the workload's own buckets.
HISTORIES: dict[str, list[tuple[str, dict[str, list[int]]]]] = {
    "qkv": [
        ("examples/qkv_dynamic.py", {"M": [32, 512]}),
        ("examples/mlp_dynamic.py", {"b": [16]}),
    ],
    "mlp": [
        ("examples/mlp_dynamic.py", {"b": [16, 128]}),
        ("examples/qkv_dynamic.py", {"M": [32]}),
    ],
    "transformer": [("examples/transformer_block_dynamic.py", {"s": [32, 128]})],
}
# tunefarm: the default job (--search auto); tunefarm(-warm)-ray/-thread/-driver: its search
# forced into Ray search actors, a driver thread or MetaSchedule's loop; tunefarm-popN: with a
# population of N; tunefarm(-warm)-noconfirm: a new best timed once (TuneConfig.confirm off);
# tunefarm(-warm)-noscreen: every candidate timed in full (MeasureConfig.screen off);
# tunefarm(-warm)-aware: each round picked by the model's rank per expected compile second
# (TuneConfig.compile_aware);
# tunefarm-warm(-transfer): the default job (with --transfer) into a copy of the workload's
# history; stock: MetaSchedule's tune_tasks with its XGBModel
VARIANTS = (
    "tunefarm",
    "tunefarm-g4",
    "tunefarm-warm",
    "tunefarm-warm-model",
    "tunefarm-exchange",
    "tunefarm-warm-g4",
    "tunefarm-warm-transfer",
    "tunefarm-ray",
    "tunefarm-thread",
    "tunefarm-warm-thread",
    "tunefarm-driver",
    "tunefarm-warm-driver",
    "tunefarm-pop512",
    "tunefarm-pop256",
    "tunefarm-warm-pop256",
    "tunefarm-pop128",
    "tunefarm-warm-pop128",
    "tunefarm-pop64",
    "tunefarm-warm-pop64",
    "tunefarm-noconfirm",
    "tunefarm-warm-noconfirm",
    "tunefarm-noscreen",
    "tunefarm-warm-noscreen",
    "tunefarm-aware",
    "tunefarm-warm-aware",
    "stock",
    "stock-long",
)
DEFAULT_VARIANTS = ("tunefarm", "tunefarm-warm", "stock")
# a variant's --search, by its suffix
SEARCH_OF = {"-ray": "ray", "-thread": "thread", "-driver": "driver"}


def search_of(variant: str) -> str:
    """A TuneFarm variant's ``--search`` mode."""
    suffix = variant.removeprefix("tunefarm").removeprefix("-warm")
    return SEARCH_OF.get(suffix, "auto")


WARM_VARIANTS = (
    "tunefarm-warm",
    "tunefarm-warm-model",
    "tunefarm-warm-thread",
    "tunefarm-warm-driver",
    "tunefarm-warm-g4",
    "tunefarm-warm-transfer",
    "tunefarm-warm-pop256",
    "tunefarm-warm-pop128",
    "tunefarm-warm-pop64",
    "tunefarm-warm-noconfirm",
    "tunefarm-warm-noscreen",
    "tunefarm-warm-aware",
)
# the options a pairs file records and ``--resume`` continues with
PROTOCOL = ("trials_per_task", "budget", "history_trials_per_task", "history_per_seed", "variants")
LEVELS = (0.9, 0.95)
BUDGETS = ("trials", "wall")
WALL_TRIALS_FACTOR = 4  # --budget wall: TuneFarm's trial cap, times the trials stock runs
NOISY_SPREAD = 0.25  # an interquartile range above this share of the median
# the report's section in its file (docs/performance.md by default): replaced run after run
BEGIN, END = "<!-- time-to-quality -->", "<!-- /time-to-quality -->"
log = logging.getLogger("tunefarm.bench.ttq")


@dataclass(frozen=True)
class RunResult:
    """One variant's tune of one workload at one seed."""

    workload: str
    variant: str
    seed: int
    wall_sec: float
    trials: int
    curve: list[tuple[float, float]]  # (seconds since the start, model latency in seconds)
    phases: dict[str, float] | None = None
    # share of the devices' time spent measuring while the job had budget left (TuneFarm)
    device_busy: float | None = None
    # the model latency of the run's final schedules, re-timed side by side with every other
    # run of the workload after the seeds (:func:`retime`): what the job's own measurements
    # say can differ with the load while it ran
    retimed_sec: float | None = None
    # how a TuneFarm run searched (tune's summary.search: mode, per_round, population, ...)
    search: dict[str, Any] | None = None

    @property
    def final_sec(self) -> float | None:
        return self.curve[-1][1] if self.curve else None

    def time_to(self, target_sec: float) -> float | None:
        """Seconds until the model's latency was at most ``target_sec`` (None: never)."""
        return next((t for t, sec in self.curve if sec <= target_sec), None)


def model_latency_curve(
    events: list[tuple[float, str, float]], weights: dict[str, int]
) -> list[tuple[float, float]]:
    """``(t, sum of weight x best so far)`` after each event ``(t, task, sec)`` that lowers it,
    from the first moment every task in ``weights`` has a measurement."""
    best: dict[str, float] = {}
    curve: list[tuple[float, float]] = []
    for t, task, sec in sorted(events):
        if task not in weights or not (sec > 0):
            continue
        if sec < best.get(task, float("inf")):
            best[task] = sec
            if len(best) == len(weights):
                total = sum(weights[k] * best[k] for k in weights)
                if not curve or total < curve[-1][1]:
                    curve.append((t, total))
    return curve


def _bucket_tasks(model_path: Path, target: Any, buckets: dict[str, list[int]]) -> list[Any]:
    from tuner.model import load_model
    from tuner.symbolic.buckets import bucket_tasks

    return bucket_tasks(load_model(model_path).mod, target, buckets)


def _measure(screen: bool = True) -> Any:
    """The measurement settings of every variant (stock's runner takes the same repeats and
    minimum); ``screen``: TuneFarm's screen of slow candidates at its default, else off."""
    from workers.config import MeasureConfig

    return MeasureConfig(min_repeat_ms=20, repeat=3, **({} if screen else {"screen": 0.0}))


def run_tunefarm(
    workload: str,
    model_path: Path,
    target: Any,
    buckets: dict[str, list[int]],
    trials: int,
    seed: int,
    population: int | None,
    tmp: Path,
    variant: str,
    search: str = "auto",
    history: Path | None = None,
    transfer: bool = False,
    generations: int | None = None,
    siblings: int | None = None,
    exchange: bool = False,
    time_budget_sec: float | None = None,
    per_iter: int | None = None,
    confirm: bool = True,
    screen: bool = True,
    compile_aware: bool = False,
) -> tuple[RunResult, list[Any]]:
    """TuneFarm's job on the embedded default into a fresh SQLite file, or into a copy of
    ``history``; only the job's own records count in the curve. Also each bucket task's final
    schedule (:func:`final_schedules`). ``time_budget_sec``/``per_iter``: ``tune
    --time-budget``/``--per-iter``."""
    from database import Storage, TuneFarmDatabase, shash_of
    from database.queries import record_timeline
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model

    tasks = [bt.task for bt in _bucket_tasks(model_path, target, buckets)]
    weights = {shash_of(t.mod): t.weight for t in tasks}
    path = tmp / f"{workload}-{variant}-{seed}.db"
    if history is not None:
        shutil.copyfile(history, path)
    url = f"sqlite:///{path}"
    config = TuneConfig(
        trials=trials,
        seed=seed,
        population=population,
        measure=_measure(screen),
        search=search,
        transfer=transfer,
        generations=generations,
        **({} if siblings is None else {"siblings": siblings}),
        exchange=exchange,
        time_budget_sec=time_budget_sec,
        **({"trials_per_iter": per_iter} if per_iter else {}),
        confirm=confirm,
        compile_aware=compile_aware,
    )
    start = time.time()
    summary = tune(
        load_model(model_path).mod,
        target,
        Storage(url),
        config,
        buckets=buckets,
        model_name=workload,
    )
    wall = time.time() - start
    storage = Storage(url, create=False)
    schedules = final_schedules(TuneFarmDatabase(storage, target), tasks, target)
    rows = record_timeline(storage, valid_only=True)
    events = [
        (created.timestamp() - start, shash, float(sec))
        for shash, created, sec in rows
        if created.timestamp() >= start  # the history's records are not this run's
    ]
    run = RunResult(
        workload,
        variant,
        seed,
        wall,
        summary.trials_measured,
        model_latency_curve(events, weights),
        dict(summary.phases),
        summary.devices.get("busy"),
        search={k: v for k, v in summary.search.items() if k != "events"},
    )
    return run, schedules


def final_schedules(db: Any, tasks: list[Any], target: Any) -> list[Any]:
    """Each task's best schedule in ``db`` (a MetaSchedule database) as a scheduled module
    (None for a task without a record)."""
    out = []
    with target:
        for task in tasks:
            sch = db.query_schedule(task.mod, target, "main")
            out.append(sch.mod if sch is not None else None)
    return out


def retime(
    schedules: list[list[Any]], weights: list[int], target: Any, rounds: int = 5
) -> list[float | None]:
    """The model latency (sum of weight x time) of each run's final schedules, every kernel
    timed in the same process with the same settings, runs interleaved round by round (each
    round starting at another run) so that drift hits all of them; per kernel the median of
    ``rounds``. None for a run with a task it has no schedule for."""
    import numpy as np
    import tvm

    from tuner.kernel_profile import time_per_call
    from workers import fast_math

    fast_math.install()  # the erf lowering every variant's builders compiled (and builds ship)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    measure = _measure()
    fns: dict[tuple[int, int], Any] = {}
    args: dict[int, list[Any]] = {}
    for r, mods in enumerate(schedules):
        for t, mod in enumerate(mods):
            if mod is None:
                continue
            fns[(r, t)] = tvm.compile(mod, target)["main"]
            if t not in args:
                args[t] = [
                    tvm.runtime.tensor(
                        rng.standard_normal([int(d) for d in p.shape]).astype(p.dtype), dev
                    )
                    for p in mod["main"].params
                ]
    secs: dict[tuple[int, int], list[float]] = {key: [] for key in fns}
    keys = sorted(fns)
    for i in range(rounds):
        shift = (i * len(keys)) // rounds
        for r, t in keys[shift:] + keys[:shift]:
            fns[(r, t)](*args[t])  # warm up
            secs[(r, t)].append(time_per_call(fns[(r, t)], args[t], measure.min_repeat_ms / 1e3))
    out: list[float | None] = []
    for r, mods in enumerate(schedules):
        if any(m is None for m in mods):
            out.append(None)
            continue
        out.append(sum(w * statistics.median(secs[(r, t)]) for t, w in enumerate(weights)))
    return out


def build_history(
    workload: str, target: Any, trials_per_task: int, tmp: Path, seed: int = 0
) -> Path:
    """The team history of ``workload`` (:data:`HISTORIES`): each of its models tuned by a
    cold TuneFarm job into one SQLite file, with the cost-model snapshot the next job reads;
    ``seed`` offsets their seeds (seed 0's history is also a run's one history under
    ``--no-history-per-seed``)."""
    from database import Storage, TargetKey
    from tuner.cost_model.ranker import RankerParams
    from tuner.cost_model.warm import base_model
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model

    path = tmp / f"{workload}-history.db"
    path.unlink(missing_ok=True)
    storage = Storage(f"sqlite:///{path}")
    for i, (rel, buckets) in enumerate(HISTORIES[workload]):
        n_tasks = len(_bucket_tasks(ROOT / rel, target, buckets))
        config = TuneConfig(
            trials=n_tasks * trials_per_task,
            seed=1000 + 100 * seed + i,
            measure=_measure(),
            warm_start=False,
        )
        tune(
            load_model(ROOT / rel).mod,
            target,
            storage,
            config,
            buckets=buckets,
            model_name=f"history-{Path(rel).stem}",
        )
    # what the first teammate's warm job leaves behind for the next: the base model's snapshot
    base_model(storage, TargetKey.of(target), RankerParams(nthread=os.cpu_count() or 1))
    storage.dispose()
    return path


def _history(
    console: Any, workload: str, target: Any, trials_per_task: int, tmp: Path, seed: int
) -> Path:
    """:func:`build_history`, saying what it builds and how long it took."""
    console.print(f"[bold]{workload}[/bold] history (seed {seed}): {HISTORIES[workload]}")
    started = time.time()
    path = build_history(workload, target, trials_per_task, tmp, seed)
    console.print(f"  built in {time.time() - started:.1f} s")
    return path


def run_stock(
    workload: str,
    model_path: Path,
    target: Any,
    buckets: dict[str, list[int]],
    trials: int,
    seed: int,
    tmp: Path,
    per_iter: int,
    variant: str = "stock",
) -> tuple[RunResult, list[Any]]:
    """Stock MetaSchedule over the same bucket tasks in rounds of ``per_iter``, timed by a
    measure callback (the run named ``variant``); also each task's final schedule."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from benchmarks.suite import STOCK_BUILD_TIMEOUT_S
    from tuner.fastimport import prepare_stock_builder

    start = time.time()
    tasks = [bt.task for bt in _bucket_tasks(model_path, target, buckets)]
    events: list[tuple[float, str, float]] = []
    count = [0]

    @derived_object
    class Clock(PyMeasureCallback):
        def apply(self, _sched: Any, task_id: int, _c: list, builds: list, runs: list) -> None:
            now = time.time() - start
            for b, r in zip(builds, runs, strict=True):
                count[0] += 1
                secs = [float(x) for x in r.run_secs] if r.run_secs else []
                if b.error_msg is None and r.error_msg is None and secs:
                    events.append((now, str(task_id), sum(secs) / len(secs)))

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    measure = _measure()
    contexts = [
        ms.TuneContext(
            mod=t.mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy="evolutionary",
            task_name=t.name,
            rand_state=seed + i,
            num_threads=os.cpu_count() or 1,
        ).clone()
        for i, t in enumerate(tasks)
    ]
    database = ms.database.MemoryDatabase()
    with tempfile.TemporaryDirectory(prefix="stock-ms-", dir=tmp) as work_dir:
        ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=[float(t.weight) for t in tasks],
            work_dir=work_dir,
            max_trials_global=trials,
            num_trials_per_iter=per_iter,
            builder=ms.builder.LocalBuilder(
                timeout_sec=STOCK_BUILD_TIMEOUT_S, initializer=prepare_stock_builder
            ),
            runner=ms.runner.LocalRunner(
                evaluator_config=ms.runner.EvaluatorConfig(
                    number=measure.number,
                    repeat=measure.repeat,
                    min_repeat_ms=measure.min_repeat_ms,
                )
            ),
            database=database,
            cost_model="xgb",
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.RemoveBuildArtifact(),
                ms.measure_callback.UpdateCostModel(),
                Clock(),
            ],
            task_scheduler="gradient",
        )
    wall = time.time() - start
    weights = {str(i): t.weight for i, t in enumerate(tasks)}
    run = RunResult(workload, variant, seed, wall, count[0], model_latency_curve(events, weights))
    return run, final_schedules(database, tasks, target)


# --------------------------------------------------------------------------- summary
def _quartiles(values: list[float]) -> dict[str, float]:
    if len(values) == 1:
        return {"median": values[0], "q1": values[0], "q3": values[0]}
    q = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2]}


def on_retimed_scale(runs: list[RunResult]) -> list[RunResult]:
    """Each run's curve scaled by its final's re-timed / own latency, so that every run's
    curve is in the units of the side-by-side re-timing (a job's own runner can time
    kernels consistently faster or slower than another's); runs not re-timed are left out."""
    return [
        replace(r, curve=[(t, sec * r.retimed_sec / r.final_sec) for t, sec in r.curve])
        for r in runs
        if r.retimed_sec and r.final_sec
    ]


def summarize(runs: list[RunResult], scaled: bool = True) -> dict[str, Any]:
    """Per variant: time to each level of the best any run found, final latency and wall time
    (median and quartiles over seeds), and ratios of medians to stock's. With ``scaled``,
    also the same figures on the re-timed scale (:func:`on_retimed_scale`) under
    ``retimed_scale``, when the runs were re-timed."""
    finals = [r.final_sec for r in runs if r.final_sec is not None]
    if not finals:
        return {"best_sec": None, "variants": {}}
    best = min(finals)
    out: dict[str, Any] = {"best_sec": best, "variants": {}}
    rescaled = on_retimed_scale(runs) if scaled else []
    if rescaled and {r.variant for r in rescaled} == {r.variant for r in runs}:
        out["retimed_scale"] = summarize(rescaled, scaled=False)
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        entry: dict[str, Any] = {
            "seeds": [r.seed for r in mine],
            "wall_sec": _quartiles([r.wall_sec for r in mine]),
            "final_sec": _quartiles([r.final_sec for r in mine if r.final_sec is not None]),
            "trials": [r.trials for r in mine],
        }
        retimed = [r.retimed_sec for r in mine if r.retimed_sec is not None]
        if retimed:
            entry["retimed_sec"] = _quartiles(retimed)
        if any(r.phases for r in mine):
            shares = [
                r.phases.get("search", 0.0) / r.wall_sec for r in mine if r.phases and r.wall_sec
            ]
            entry["search_share"] = _quartiles(shares)
        busy = [r.device_busy for r in mine if r.device_busy is not None]
        if busy:
            entry["device_busy"] = _quartiles(busy)
        for level in LEVELS:
            entry[f"to_{round(level * 100)}"] = _time_to(mine, best / level)
        out["variants"][variant] = entry
    for name, entry in out["variants"].items():
        cold = cold_counterpart(name)
        if name in WARM_VARIANTS and cold in out["variants"]:
            entry["wall_vs_cold"] = wall_vs_cold(runs, name, cold)
    stock = out["variants"].get("stock")
    if stock:
        # what a user would otherwise get: stock's median final latency, and how soon each
        # variant's runs had it
        target = stock["final_sec"]["median"]
        for name, entry in out["variants"].items():
            entry["to_stock"] = _time_to([r for r in runs if r.variant == name], target)
        for name, entry in out["variants"].items():
            if name == "stock":
                continue
            ratios = {
                key: _vs(entry[key], stock[key])
                for key in ("to_90", "to_95", "wall_sec", "final_sec", "retimed_sec")
                if key in entry and key in stock
            }
            # against stock's whole run: the time it took to give that latency
            ratios["to_stock"] = _vs(entry["to_stock"], stock["wall_sec"])
            long = out["variants"].get("stock-long")
            if long and name != "stock-long":  # against stock given as long as it needs
                for key in ("to_90", "to_95"):
                    ratios[f"{key}_long"] = _vs(entry[key], long[key])
            entry["vs_stock"] = ratios
            entry["head_to_head"] = head_to_head(runs, name)
    return out


def wall_vs_cold(runs: list[RunResult], warm: str, cold: str) -> dict[str, Any] | None:
    """A warm variant's wall time over its cold counterpart's, seed by seed: the median and
    quartiles of the ratios of the two runs of each seed (the seeds run interleaved, so the
    two runs of a seed share the machine's drift, where one slow run moves a ratio of
    medians); None when no seed ran both."""
    walls = {(r.variant, r.seed): r.wall_sec for r in runs}
    paired = [
        sec / walls[(cold, seed)]
        for (variant, seed), sec in walls.items()
        if variant == warm and walls.get((cold, seed))
    ]
    return _quartiles(paired) if paired else None


def head_to_head(runs: list[RunResult], variant: str, level: float = LEVELS[0]) -> dict[str, Any]:
    """``variant`` against stock alone: the time each took to ``level`` of the best latency
    either of them found (a warm variant's history can set a bar no cold run reaches in
    stock's time: the cold job is then judged against stock by a level neither reached)."""
    mine = [r for r in runs if r.variant == variant]
    stock = [r for r in runs if r.variant == "stock"]
    best = min(r.final_sec for r in mine + stock if r.final_sec is not None)
    ours, theirs = _time_to(mine, best / level), _time_to(stock, best / level)
    return {"best_sec": best, "to": ours, "stock_to": theirs, "vs_stock": _vs(ours, theirs)}


def _time_to(runs: list[RunResult], target_sec: float) -> dict[str, Any]:
    """When ``runs`` had a model latency of at most ``target_sec``: how many did, and the
    quartiles over all of them. A run that never did counts as its whole wall time (a lower
    bound), so the median is not better than what the runs showed."""
    times = [r.time_to(target_sec) for r in runs]
    counted = [t if t is not None else r.wall_sec for t, r in zip(times, runs, strict=True)]
    return {"reached": f"{sum(t is not None for t in times)}/{len(runs)}", **_quartiles(counted)}


def _vs(a: dict[str, float], b: dict[str, float]) -> dict[str, Any]:
    """The ratio of two medians, noisy when either side's interquartile range is wide."""
    noisy = any((x["q3"] - x["q1"]) > NOISY_SPREAD * x["median"] for x in (a, b) if x["median"])
    return {"ratio": a["median"] / b["median"] if b["median"] else None, "noisy": noisy}


def plot(workload: str, runs: list[RunResult], best: float, path: Path) -> None:
    """Median best-so-far speed (best / latency) against wall time, with the interquartile band,
    one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    horizon = max(r.wall_sec for r in runs)
    grid = np.linspace(0, horizon, 200)
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in dict.fromkeys(r.variant for r in runs):
        rows = []
        for r in (r for r in runs if r.variant == variant):
            ts = np.array([t for t, _ in r.curve] or [horizon])
            quality = np.array([best / s for _, s in r.curve] or [0.0])
            idx = np.searchsorted(ts, grid, side="right") - 1
            rows.append(np.where(idx >= 0, quality[np.clip(idx, 0, None)], 0.0))
        data = np.array(rows)
        med = np.median(data, axis=0)
        ax.plot(grid, med, label=f"{variant} (n={len(rows)})")
        ax.fill_between(
            grid, np.percentile(data, 25, axis=0), np.percentile(data, 75, axis=0), alpha=0.2
        )
    for level in LEVELS:
        ax.axhline(level, color="grey", lw=0.5, ls="--")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("best latency found / model latency so far")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"time to quality: {workload}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(entry: dict[str, float], unit: str = "s") -> str:
    scale, suffix = (1e6, " us") if unit == "us" else (1.0, " s")
    return (
        f"{entry['median'] * scale:.1f}{suffix} "
        f"[{entry['q1'] * scale:.1f}-{entry['q3'] * scale:.1f}]"
    )


def cold_counterpart(variant: str) -> str:
    """The cold variant a warm one is compared with: the same search settings without the
    history (``tunefarm-warm-g4`` -> ``tunefarm-g4``; ``-transfer`` is part of the warm
    start, so ``tunefarm-warm-transfer`` -> ``tunefarm``; so is ``-model``)."""
    rest = variant.removeprefix("tunefarm-warm").removeprefix("-transfer").removeprefix("-model")
    return "tunefarm" + rest


def _ratio(vs: dict[str, Any] | None) -> str:
    if not vs or vs["ratio"] is None:
        return "-"
    return f"{vs['ratio']:.2f}x" + (" (noisy)" if vs["noisy"] else "")


def table(results: dict[str, Any]) -> str:
    """A markdown table of every workload's summary."""
    by_wall = results.get("budget") == "wall"
    lines = [
        "| workload | variant | to 90% | to 95% | to stock's final (vs stock's wall) | "
        "final latency | final, re-timed | wall | trials | search share | device busy | "
        "to 90% vs stock | head to head | re-timed vs stock | wall vs cold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, res in results["workloads"].items():
        for variant, e in res["summary"]["variants"].items():
            ratio = _ratio(e.get("vs_stock", {}).get("to_90"))
            final_ratio = _ratio(e.get("vs_stock", {}).get("retimed_sec"))
            retimed = _fmt(e["retimed_sec"], "us") if "retimed_sec" in e else "-"
            share = f"{e['search_share']['median']:.0%}" if "search_share" in e else "-"
            busy = f"{e['device_busy']['median']:.0%}" if "device_busy" in e else "-"
            vs_cold = "-" if by_wall else _wall_vs_cold_cell(e, res["summary"]["variants"], variant)
            trials = f"{statistics.median(e['trials']):g}" if e.get("trials") else "-"
            lines.append(
                f"| {workload} | {variant} | {_fmt(e['to_90'])} ({e['to_90']['reached']}) | "
                f"{_fmt(e['to_95'])} ({e['to_95']['reached']}) | {_to_stock_cell(e)} | "
                f"{_fmt(e['final_sec'], 'us')} | "
                f"{retimed} | {_fmt(e['wall_sec'])} | {trials} | {share} | {busy} | {ratio} | "
                f"{_head_to_head_cell(e)} | {final_ratio} | {vs_cold} |"
            )
    return "\n".join(lines)


def _wall_vs_cold_cell(e: dict[str, Any], variants: dict[str, Any], variant: str) -> str:
    """A warm variant's wall time over its cold counterpart's: the ratio of their medians,
    and the median [quartiles] of the seed-by-seed ratios (:func:`wall_vs_cold`)."""
    cold = variants.get(cold_counterpart(variant))
    if not (cold and variant in WARM_VARIANTS and cold["wall_sec"]["median"]):
        return "-"
    cell = f"{e['wall_sec']['median'] / cold['wall_sec']['median']:.2f}x"
    paired = e.get("wall_vs_cold")
    if paired:
        cell += f"; by seed {paired['median']:.2f}x [{paired['q1']:.2f}-{paired['q3']:.2f}]"
    return cell


def _to_stock_cell(e: dict[str, Any]) -> str:
    """When a variant's runs had stock's final latency, and that over stock's wall time."""
    if "to_stock" not in e:
        return "-"
    vs = e.get("vs_stock", {}).get("to_stock")
    return f"{_fmt(e['to_stock'])} ({e['to_stock']['reached']})" + (f", {_ratio(vs)}" if vs else "")


def _head_to_head_cell(e: dict[str, Any]) -> str:
    """The head-to-head ratio, with how many runs of the variant and of stock reached it."""
    pair = e.get("head_to_head")
    if not pair:
        return "-"
    return f"{_ratio(pair['vs_stock'])} ({pair['to']['reached']} vs {pair['stock_to']['reached']})"


def long_table(results: dict[str, Any]) -> str:
    """Each variant's times to 90% and 95% against ``stock-long``'s (empty without it)."""
    lines = [
        "| workload | variant | to 90% | stock-long to 90% | to 90% vs stock-long | to 95% | "
        "stock-long to 95% | to 95% vs stock-long |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, res in results["workloads"].items():
        variants = res["summary"]["variants"]
        long = variants.get("stock-long")
        if not long:
            continue
        for variant, e in variants.items():
            if variant == "stock-long":
                continue
            vs = e.get("vs_stock", {})
            cells = []
            for key in ("to_90", "to_95"):
                cells += [
                    f"{_fmt(e[key])} ({e[key]['reached']})",
                    f"{_fmt(long[key])} ({long[key]['reached']})",
                    # stock itself has no vs_stock: its ratio to stock-long from the entries
                    _ratio(vs.get(f"{key}_long") or _vs(e[key], long[key])),
                ]
            lines.append(f"| {workload} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def retimed_table(results: dict[str, Any]) -> str:
    """The times to quality on the re-timed scale, per workload and variant (empty when no
    run was re-timed)."""
    lines = [
        "| workload | variant | to 90% | to stock's final (vs stock's wall) | to 90% vs stock | "
        "head to head |",
        "|---|---|---|---|---|---|",
    ]
    for workload, res in results["workloads"].items():
        scaled = res["summary"].get("retimed_scale")
        for variant, e in (scaled or {}).get("variants", {}).items():
            lines.append(
                f"| {workload} | {variant} | {_fmt(e['to_90'])} ({e['to_90']['reached']}) | "
                f"{_to_stock_cell(e)} | {_ratio(e.get('vs_stock', {}).get('to_90'))} | "
                f"{_head_to_head_cell(e)} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


def write_report(results: dict[str, Any], results_file: Path, report: Path) -> None:
    """The run's section of ``report`` (``docs/performance.md`` by default, after the suite's
    report): how the run was made, the table, the plots. The section sits between
    :data:`BEGIN` and :data:`END`; the rest of the file is kept (a file without the markers
    gets the section at its end)."""
    m = results["machine"]
    rel = os.path.relpath(results_file, report.parent)
    lines = [
        BEGIN,
        "## Time to a fast model",
        "",
        "Generated by `python -m benchmarks time-to-quality` "
        "(`benchmarks/time_to_quality.py`, which documents the protocol) from one run; "
        "every figure compares runs interleaved seed by seed in that run. Never compare "
        "with a run on another machine or session.",
        "",
        f"- date {results['date']}; host `{m.get('hostname')}`; cpu {m.get('cpu')}; "
        f"load average {results.get('load')}; results `{rel}`",
        f"- {results['seeds']} seeds per variant, {results['trials_per_task']} trials per "
        "task (the same budget, round size and measurement settings for every variant)"
        if results.get("budget", "trials") == "trials"
        else f"- {results['seeds']} seeds per variant, **the same wall time**: stock runs "
        f"{results['trials_per_task']} trials per task first in each seed, and each TuneFarm "
        "variant then tunes until that run's wall time (`tune --time-budget`; at most "
        f"{WALL_TRIALS_FACTOR}x the trials, the same measurement settings and round size, "
        "at most the 16 a timed job's rounds are capped at)",
        "- medians over seeds with the interquartile range in brackets; a run that never "
        "reached a level counts its whole wall time; a ratio is marked noisy when either "
        "side's interquartile range exceeds 25% of its median",
        "",
        table(results),
        "",
    ]
    longer = long_table(results)
    if longer:
        lines += [
            "Against stock given as long as a timed TuneFarm job may search (`stock-long`: "
            f"{WALL_TRIALS_FACTOR}x stock's trials, after the others in each seed): stock's own "
            "run seldom reaches 90% of the best any run found, so its time to that level in the "
            "first table is a lower bound and the ratio to it an upper bound; here the "
            "denominator is when stock reached the level, given the time.",
            "",
            longer,
            "",
        ]
    scaled = retimed_table(results)
    if scaled:
        lines += [
            "On the re-timed scale: each run's curve scaled by its final's re-timed latency "
            "over the one its job measured (each job's runner times under its own conditions: "
            "its final and the side-by-side re-timing can differ by tens of percent, and not "
            "by the same factor for every tuner). The levels are then the re-timed ones.",
            "",
            scaled,
            "",
        ]
    lines += [
        "Device busy: the share of the devices' time spent measuring while the job had "
        "budget left. Wall vs cold: a warm variant's median wall time over its cold "
        "counterpart's (the same search settings without the history: `tunefarm-warm-g4` "
        "over `tunefarm-g4`, the others over `tunefarm`), at the same trials (none when the "
        "budget is wall time), then by seed: the median [quartiles] of each seed's warm run "
        "over its cold run (interleaved, they share the machine's drift). Head to head: the "
        "variant's median time to 90% of the best "
        "latency of its and stock's runs only, over stock's (how many runs of each reached "
        "it): a history can set a bar in the first column that no cold run reaches in "
        "stock's time. Trials: the median of the runs' measured candidates. To "
        "stock's final: when a run's model latency was at most stock's median final latency "
        "(a run that never got there counts its whole wall time), and that median over "
        "stock's median wall time.",
        "",
    ]
    hist_trials = results.get("history_trials_per_task", results["trials_per_task"])
    for workload, res in results["workloads"].items():
        if res.get("history"):
            shapes = "; ".join(
                f"`{rel}` at {', '.join(f'{k}={v}' for k, v in b.items())}"
                for rel, b in res["history"]
            )
            lines.append(
                f"- {workload}: the warm runs start from a copy of a history of {shapes} "
                f"(cold jobs of {hist_trials} trials per task, "
                + (
                    "one built before each seed)"
                    if results.get("history_per_seed")
                    else "built before the seeds)"
                )
            )
    lines.append("")
    for workload, res in results["workloads"].items():
        plot_rel = os.path.relpath(results_file.with_name(res["plot"]), report.parent)
        lines.append(f"![{workload}]({plot_rel})")
        lines.append("")
    lines.append(END)
    section = "\n".join(lines)
    text = report.read_text() if report.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section + "\n"
    report.write_text(text)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks time-to-quality``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks time-to-quality")
    parser.add_argument("--workloads", nargs="+", default=["mlp"], choices=list(WORKLOADS))
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--seeds", type=int, default=4, help="pairs to run (seeds after --resume's last)"
    )
    parser.add_argument("--trials-per-task", type=int, default=64)
    parser.add_argument(
        "--budget",
        choices=BUDGETS,
        default="wall",
        help="what every variant gets the same of: trials, or wall time (stock's, per seed)",
    )
    parser.add_argument(
        "--history-trials-per-task",
        type=int,
        default=None,
        help="trials per task of the history's cold jobs (default: --trials-per-task)",
    )
    parser.add_argument(
        "--history-per-seed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build the warm runs' history anew for each seed (the default), or once per "
        "workload (--no-history-per-seed: one history's luck in every warm run)",
    )
    parser.add_argument(
        "--summarize",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="run nothing: summarize a results file's runs again (into it) and write the report",
    )
    add_pair_args(parser)
    parser.add_argument(
        "--report",
        type=Path,
        default=ROOT / "docs" / "performance.md",
        help="Markdown file whose time-to-quality section the run writes (the rest is kept)",
    )
    return parser


def pair_order(variants: list[str], seed: int, budget: str) -> list[str]:
    """The run order of seed ``seed``'s pair: ``variants`` alternating from pair to pair
    (:func:`benchmarks.verdict.alternate`), except that stock runs first at a wall-time budget
    (its wall time is the others') and ``stock-long`` last (it runs longest)."""
    rest = [v for v in variants if v not in ("stock", "stock-long")]
    if budget == "wall":
        head = ["stock"] if "stock" in variants else []
        order = head + alternate(rest, seed)
    else:
        order = alternate([v for v in variants if v != "stock-long"], seed)
    return order + (["stock-long"] if "stock-long" in variants else [])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.summarize is not None:
        return resummarize(args.summarize, args.report)
    earlier: list[dict[str, Any]] = []
    if args.resume is not None:
        # a later run of the same protocol, on any host: the file's settings, the next seeds
        earlier = resume(parser, args, "time-to-quality")
    if args.history_trials_per_task is None:
        args.history_trials_per_task = args.trials_per_task
    if args.seeds < 1 or args.trials_per_task < 1 or args.history_trials_per_task < 1:
        parser.error("--seeds, --trials-per-task and --history-trials-per-task must be at least 1")
    if args.budget == "wall":
        if "stock" not in args.variants:
            parser.error("--budget wall needs the stock variant: its wall time is the budget")
        # stock first in each seed: its wall time is the TuneFarm variants' budget
        args.variants = ["stock", *(v for v in args.variants if v != "stock")]
    if "stock-long" in args.variants:  # after the others: it runs longest
        args.variants = [*(v for v in args.variants if v != "stock-long"), "stock-long"]

    from rich.console import Console

    from tuner.bench.timing import bench_threads
    from tuner.job import TuneConfig
    from tuner.search.population import trials_per_round
    from tuner.targets import resolve_target

    console = Console()
    target = resolve_target("llvm")
    # every variant times kernels on the target's cores: stock's LocalRunner workers and the
    # re-timing in this process read it (TVM's own default here is half the CPUs); TuneFarm's
    # runners take the target's num-cores themselves
    os.environ.setdefault("TVM_NUM_THREADS", str(bench_threads(target)))
    out_path = args.out or results_path("time-to-quality")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    pairs_path = args.resume or out_path.with_suffix(".pairs.jsonl")
    header = pair_header()
    settings = {key: getattr(args, key) for key in PROTOCOL}
    console.print(f"pairs: {pairs_path} (each finished pair appended)")
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_header(),
        "target": str(target),
        "seeds": args.seeds,
        "trials_per_task": args.trials_per_task,
        "history_trials_per_task": args.history_trials_per_task,
        "history_per_seed": args.history_per_seed,
        "budget": args.budget,
        "commit": header["commit"],
        "pairs": str(pairs_path),
        "workloads": {},
    }
    with tempfile.TemporaryDirectory(prefix="ttq-") as tmp_dir:
        tmp = Path(tmp_dir)
        for workload in args.workloads:
            rel, buckets = WORKLOADS[workload]
            model_path = ROOT / rel
            weights = [bt.task.weight for bt in _bucket_tasks(model_path, target, buckets)]
            n_tasks = len(weights)
            trials = n_tasks * args.trials_per_task
            history = None
            warm = any(v in WARM_VARIANTS for v in args.variants)
            runs: list[RunResult] = []
            # the round size of a TuneFarm job of ``trials`` (TuneConfig's default cap): stock's
            # too, and a timed TuneFarm job's with more trials (--budget wall)
            per_iter = trials_per_round(TuneConfig.trials_per_iter, trials, n_tasks)
            # seeds outermost, each seed a pair: its variants back to back, the order
            # alternating from pair to pair, so that drift in the machine hits every variant
            first = next_seed(earlier, {"workload": workload})
            for seed in range(first, first + args.seeds):
                # outside every variant's wall time: one for each seed, or seed 0's for all
                if warm and (args.history_per_seed or history is None):
                    history = _history(
                        console, workload, target, args.history_trials_per_task, tmp, seed
                    )
                stock_wall = None
                pair_runs: list[RunResult] = []
                pair_schedules: list[list[Any]] = []
                for variant in pair_order(args.variants, seed, args.budget):
                    timed = args.budget == "wall" and not variant.startswith("stock")
                    # stock-long: stock's time to a level given as long as TuneFarm may search
                    run_trials = WALL_TRIALS_FACTOR * trials if variant == "stock-long" else trials
                    console.print(
                        f"[bold]{workload}[/bold] seed {seed} {variant}: {n_tasks} tasks, "
                        + (
                            f"{stock_wall:.1f} s (stock's), at most "
                            f"{WALL_TRIALS_FACTOR * trials} trials"
                            if timed and stock_wall
                            else f"{run_trials} trials"
                        )
                    )
                    if variant.startswith("stock"):
                        run, final = run_stock(
                            workload,
                            model_path,
                            target,
                            buckets,
                            run_trials,
                            seed,
                            tmp,
                            per_iter,
                            variant,
                        )
                        if variant == "stock":
                            stock_wall = run.wall_sec
                    else:
                        pop = re.search(r"-pop(\d+)$", variant)
                        population = int(pop.group(1)) if pop else None
                        run, final = run_tunefarm(
                            workload,
                            model_path,
                            target,
                            buckets,
                            WALL_TRIALS_FACTOR * trials if timed else trials,
                            seed,
                            population,
                            tmp,
                            variant,
                            search=search_of(variant),
                            history=history if variant in WARM_VARIANTS else None,
                            transfer=variant == "tunefarm-warm-transfer",
                            siblings=0 if variant == "tunefarm-warm-model" else None,
                            exchange=variant == "tunefarm-exchange",
                            generations=4 if variant.endswith("-g4") else None,
                            time_budget_sec=stock_wall if timed else None,
                            per_iter=per_iter if timed else None,
                            confirm=not variant.endswith("-noconfirm"),
                            screen=not variant.endswith("-noscreen"),
                            compile_aware=variant.endswith("-aware"),
                        )
                    console.print(
                        f"  wall {run.wall_sec:.1f} s, final {run.final_sec * 1e6:.1f} us"
                        if run.final_sec
                        else f"  wall {run.wall_sec:.1f} s"
                    )
                    pair_runs.append(run)
                    pair_schedules.append(final)
                # the pair's finals re-timed side by side, then the pair is on disk
                console.print("  re-timing the pair's final schedules side by side")
                retimed = retime(pair_schedules, weights, target)
                pair_runs = [
                    replace(r, retimed_sec=sec) for r, sec in zip(pair_runs, retimed, strict=True)
                ]
                runs += pair_runs
                append_pair(
                    pairs_path,
                    {
                        "benchmark": "time-to-quality",
                        "workload": workload,
                        "seed": seed,
                        "order": [r.variant for r in pair_runs],
                        **header,
                        "settings": settings,
                        "runs": [asdict(r) for r in pair_runs],
                    },
                )
                # the summary of this run's pairs so far
                results["workloads"][workload] = _workload_result(
                    workload, n_tasks, trials, history, runs, None
                ) | {"partial": f"{seed + 1 - first} of {args.seeds} pairs"}
                out_path.write_text(_dumps(results))
            png = out_path.with_name(f"{out_path.stem}-{workload}.png")
            results["workloads"][workload] = _workload_result(
                workload, n_tasks, trials, history, runs, png.name
            )
            best = results["workloads"][workload]["summary"]["best_sec"]
            if best:
                plot(workload, runs, best, png)
            out_path.write_text(_dumps(results))
    results["load"] = f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    out_path.write_text(_dumps(results))
    console.print(table(results))
    write_report(results, out_path, args.report)
    console.print(f"results: {out_path}; report: {args.report}")
    return 0


def resummarize(path: Path, report: Path) -> int:
    """Summarize the runs of results file ``path`` again (the summary is derived from the
    runs, which are kept as they are) and write the report from it."""
    import json

    from rich.console import Console

    try:
        results = json.loads(path.read_text())
        for res in results["workloads"].values():
            runs = [
                RunResult(**(r | {"curve": [tuple(p) for p in r["curve"]]})) for r in res["runs"]
            ]
            res["summary"] = summarize(runs)
    except (OSError, ValueError, KeyError, TypeError) as err:
        Console(stderr=True).print(f"error: {path} is not a time-to-quality results file: {err}")
        return 1
    path.write_text(_dumps(results))
    write_report(results, path, report)
    Console().print(table(results))
    return 0


def _workload_result(
    workload: str,
    n_tasks: int,
    trials: int,
    history: Path | None,
    runs: list[RunResult],
    plot_name: str | None,
) -> dict[str, Any]:
    """A workload's entry in the results file: its setting, summary and runs."""
    rel, buckets = WORKLOADS[workload]
    return {
        "model": rel,
        "buckets": buckets,
        "tasks": n_tasks,
        "trials": trials,
        "history": HISTORIES[workload] if history is not None else None,
        "summary": summarize(runs),
        "plot": plot_name,
        "runs": [asdict(r) for r in runs],
    }


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, default=str)
