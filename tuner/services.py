"""What the per-model commands do, apart from how the command line reads and prints it: tune a
model (buckets chosen, or planned from a shape profile in stages), plan, build, bench. The
``tunefarm`` commands (:mod:`tuner.cli`) check their arguments, call one of these and draw
what it returns (:mod:`tuner.cli.render`)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import TuneFarmError

if TYPE_CHECKING:
    from tuner.bench.results import BenchResult, TrafficSummary
    from tuner.compile import BuildReport
    from tuner.job import JobSummary, TuneConfig
    from tuner.progress import JobProgress

# model files whose import takes seconds (torch and its exporter, ONNX): Ray starts meanwhile
SLOW_LOADS = (".pt2", ".onnx")
# the build is timed at this many of the profile's values between stages (a stratum each)
CALIBRATION_VALUES = 8


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from and how to read it and compile for it."""

    path: Path
    target: str = "llvm"
    arch: str | None = None
    db: str | None = None  # SQLAlchemy URL (None: $TUNEFARM_DB or the default)
    entry: str = "Module"
    keep_params: bool = False

    def load(self) -> Any:
        from tuner.model import load_model

        return load_model(self.path, self.entry, keep_params=self.keep_params)

    def resolve_target(self) -> Any:
        from tuner.targets import resolve_target

        return resolve_target(self.target, self.arch)

    def storage(self, *, create: bool = True) -> Any:
        from database import Storage, default_url

        return Storage(self.db or default_url(), create=create)


# ----------------------------------------------------------------------------- tune
@contextlib.contextmanager
def ray_while_loading(
    model: Path, address: str | None, load: Callable[[], Any]
) -> Iterator[Callable[[], Any]]:
    """Yield a function returning ``load()``'s model. For a model file slow to import (a
    BERT ``.pt2``: 9-10 s, as long as the embedded Ray's own start) the model is loaded in a
    thread while Ray starts (or connects) here, and Ray stays up for the job; otherwise the
    model loads when asked and the job starts Ray itself."""
    if model.suffix not in SLOW_LOADS:
        yield load
        return
    from concurrent.futures import ThreadPoolExecutor

    from workers.connection import RayConnection

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tunefarm-load")
    try:
        loading = pool.submit(load)
        with RayConnection(address):
            yield loading.result
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def tune_model(
    source: ModelSource,
    config: TuneConfig,
    shapes: Sequence[str],
    *,
    address: str | None,
    progress: Callable[[], JobProgress | None] = lambda: None,
) -> JobSummary:
    """Tune ``source``'s kernels at the buckets of ``shapes`` (``--shape`` texts; default
    buckets for the symbolic dims not named) into its database."""
    from tuner.job import tune
    from tuner.symbolic.buckets import choose_buckets, parse_shape_options

    given = parse_shape_options(list(shapes))
    tgt = source.resolve_target()
    with ray_while_loading(source.path, address, source.load) as loading:
        loaded = loading()
        return tune(
            loaded.mod,
            tgt,
            source.storage(),
            config,
            address=address,
            model_name=source.path.stem,
            progress=progress(),
            buckets=choose_buckets(loaded.mod, given, loaded.shape_vars),
        )


def stage_budgets(new_trials: int, stages: int) -> list[int]:
    """``new_trials`` split into ``stages`` near-equal parts (earlier stages the larger),
    none empty."""
    stages = max(1, min(stages, new_trials))
    return [new_trials // stages + (i < new_trials % stages) for i in range(stages)]


@dataclass(frozen=True)
class PlannedRun:
    """What ``tune --shape-profile`` did: each stage's plan and job summary."""

    stages: tuple[tuple[Any, JobSummary], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.stages[-1][0].to_dict(),
            "trials_measured": sum(s.trials_measured for _, s in self.stages),
            "wall_sec": sum(s.wall_sec for _, s in self.stages),
            "stages": [{**s.to_dict(), "plan": p.to_dict()} for p, s in self.stages],
        }


def tune_planned(
    source: ModelSource,
    profile_path: Path,
    stages: int,
    config: TuneConfig,
    *,
    address: str | None,
    progress: Callable[[], JobProgress | None] = lambda: None,
    on_plan: Callable[[Any, int, int], None] = lambda plan, stage, of: None,
    on_summary: Callable[[JobSummary], None] = lambda summary: None,
) -> PlannedRun:
    """``tune --shape-profile``: the plan's buckets and split, in ``stages`` jobs that share
    the new trials the first plan would add; each stage after the first is re-planned from
    the database, so it sees the measured defaults, bests, tiles and gain curves of the
    earlier ones. A stage whose budget cannot measure one bucket's defaults passes its
    trials on to the next. ``on_plan(plan, stage, stages)`` before each job,
    ``on_summary`` after it."""
    from tuner.job import tune
    from workers.connection import RayConnection

    if stages < 1:
        raise TuneFarmError(f"--stages must be at least 1 (got {stages})")
    loaded, tgt, storage, profile, first = make_plan(source, profile_path, config.trials)
    total = sum(max(0, t.trials - t.recorded) for t in first.tasks)
    budgets = stage_budgets(total, stages) if total else [0]
    done: list[tuple[Any, JobSummary]] = []
    spent = carried = 0
    started = time.perf_counter()
    with RayConnection(address):  # one Ray instance for every stage
        for i, share in enumerate(budgets):
            last = i == len(budgets) - 1
            time_left = None
            if config.time_budget_sec is not None:  # the stages share the time budget
                time_left = config.time_budget_sec - (time.perf_counter() - started)
                if time_left <= 0 and done:
                    break
            if len(budgets) == 1:
                plan = first
            else:
                want = share + carried if not last else total - spent
                try:
                    # after a stage: its build timed, and the re-plan calibrated by it
                    plan = replan(
                        loaded, tgt, storage, profile, want, new_only=True, measure=bool(done)
                    )
                except TuneFarmError:
                    if last:
                        raise
                    carried += share
                    continue
                carried = 0
            on_plan(plan, i + 1, len(budgets))
            stage_config = replace(
                config,
                trials=plan.trials,
                task_trials=plan.task_trials(),
                job_name=f"{config.job_name}-{i + 1}" if config.job_name and i else config.job_name,
                time_budget_sec=None if time_left is None else max(time_left, 1e-3),
            )
            summary = tune(
                loaded.mod,
                tgt,
                storage,
                stage_config,
                address=address,
                model_name=source.path.stem,
                progress=progress(),
                buckets={plan.var: list(plan.buckets)},
            )
            spent += summary.trials_measured
            done.append((plan, summary))
            on_summary(summary)
    return PlannedRun(tuple(done))


# ----------------------------------------------------------------------------- plan
def load_checked_profile(path: Path, mod: Any) -> Any:
    """``--shape-profile FILE`` read and checked against the model (one-line errors)."""
    from tuner.symbolic.profile import load_profile

    return load_profile(path).for_model(mod)


def make_plan(
    source: ModelSource, profile_path: Path, trials: int
) -> tuple[Any, Any, Any, Any, Any]:
    """(loaded model, target, storage, profile, plan) for ``plan`` and ``tune
    --shape-profile``."""
    from tuner.symbolic.profile import load_profile

    if trials < 1:
        raise TuneFarmError(f"--trials must be at least 1 (got {trials})")
    profile = load_profile(profile_path)  # before the model: a bad file fails fast
    tgt = source.resolve_target()
    storage = source.storage()
    loaded = source.load()
    return loaded, tgt, storage, profile, replan(loaded, tgt, storage, profile, trials)


def replan(
    loaded: Any,
    tgt: Any,
    storage: Any,
    profile: Any,
    trials: int,
    *,
    new_only: bool = False,
    measure: bool = False,
) -> Any:
    """The plan from what the database holds now (``new_only``: ``trials`` new records;
    ``measure``: the planner calibrated by the database's build timed at
    :data:`CALIBRATION_VALUES` of the profile's values, and the plan made with it)."""
    from database import TuneFarmDatabase
    from tuner.planner import Planner

    db = TuneFarmDatabase(storage)
    planner = Planner(loaded.mod, tgt, db, profile, loaded.shape_vars)
    measured = None
    if measure:
        from tuner.bench.run import time_build

        checked = profile.for_model(loaded.mod)  # INPUT.AXIS names resolved
        values = sorted({s[planner.var] for s, _ in checked.representatives(CALIBRATION_VALUES)})
        shapes = [{planner.var: v} for v in values]
        timed = time_build(loaded, tgt, db, shapes, repeat=5, traffic=checked.marginals())
        measured = dict(zip(values, timed, strict=True))
    return planner.plan(trials, new_only=new_only, measured=measured)


# ----------------------------------------------------------------------------- build
def build_library(
    source: ModelSource, output: Path, *, strict: bool, shape_profile: Path | None
) -> BuildReport:
    """Compile the model with the database's best schedules into the library ``output``.
    With ``shape_profile``, the kernel serving values above the largest tuned bucket is the
    one of least expected time over the profile's traffic there."""
    from tuner.compile import compile as tf_compile
    from tuner.symbolic.profile import load_profile

    profile = load_profile(shape_profile) if shape_profile is not None else None  # fail fast
    tgt = source.resolve_target()
    storage = source.storage(create=False)
    loaded = source.load()
    traffic = profile.for_model(loaded.mod).marginals() if profile is not None else None
    ex, report = tf_compile(loaded.mod, tgt, storage, strict=strict, traffic=traffic)
    ex.export_library(str(output))
    return report


# ----------------------------------------------------------------------------- bench
@dataclass(frozen=True)
class BenchReport:
    """What ``bench`` measured: per shape a result, and with a shape profile the latency
    over its traffic."""

    model: str  # the model file's name
    target: str  # the target's kind
    reference: str | None  # the model's reference implementation (numpy, pytorch), if any
    results: tuple[BenchResult, ...]
    traffic: TrafficSummary | None = None

    @property
    def agree(self) -> bool:
        return all(r.agree for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"results": [r.to_dict() for r in self.results]}
        if self.traffic is not None:
            out["traffic"] = self.traffic.to_dict()
        return out


def runtime_names(text: str) -> list[str]:
    """The names of ``--runtimes NAME[,NAME]``; ``none`` is no name."""
    return [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]


def parse_runtimes(text: str | None) -> list[str] | None:
    """``--runtimes NAME[,NAME]`` (or none) checked against the known runtimes."""
    from tuner.bench.runtimes import RUNTIMES

    if text is None:
        return None
    names = runtime_names(text)
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown:
        raise TuneFarmError(
            f"--runtimes: unknown runtime(s) {', '.join(unknown)} "
            f"(known: {', '.join(RUNTIMES)}, or none)"
        )
    return names


def bench_decoder_folder(
    source: ModelSource, lib: Path | None, shapes: Sequence[str], runtimes: str | None
) -> Any:
    """Bench a decoder folder (:func:`tuner.llm.bench.bench_decoder`): ``--shape prompt=...``
    the prefill lengths, ``--shape context=...`` the decode contexts (defaults
    :data:`~tuner.llm.bench.PROMPTS` and :data:`~tuner.llm.bench.CONTEXTS` within the
    model's positions); ``--runtimes`` picks among torch.compile and the untuned build (both
    by default; ``none``: neither)."""
    from database import TuneFarmDatabase
    from tuner.llm.bench import CONTEXTS, DECODE_STEPS, PROMPTS, bench_decoder
    from tuner.llm.config import DecoderConfig
    from tuner.symbolic.buckets import parse_shape_options

    given = parse_shape_options(list(shapes))
    unknown = sorted(set(given) - {"prompt", "context"})
    if unknown:
        raise TuneFarmError(
            f"--shape on a decoder names prompt and context, not {', '.join(unknown)}"
        )
    names = None if runtimes is None else runtime_names(runtimes)
    if names is not None and set(names) - {"torch.compile", "untuned"}:
        raise TuneFarmError(
            "--runtimes on a decoder: torch.compile, untuned (the build without the "
            "database), both, or none"
        )
    cfg = DecoderConfig.from_folder(source.path)
    if lib is not None and not lib.is_file():
        raise TuneFarmError(f"library not found: {lib} (build it with tunefarm build)")
    room = cfg.max_positions - DECODE_STEPS  # the decode steps after the context
    prompts = given.get("prompt") or sorted({min(p, cfg.max_positions) for p in PROMPTS})
    contexts = given.get("context") or sorted({min(c, room) for c in CONTEXTS})
    db = None if lib is not None else TuneFarmDatabase(source.storage(create=False))
    return bench_decoder(
        source.path,
        source.resolve_target(),
        lib=lib,
        db=db,
        prompts=prompts,
        contexts=contexts,
        compiled=names is None or "torch.compile" in names,
        untuned=names is None or "untuned" in names,
    )


def bench_model(
    source: ModelSource,
    shapes: Sequence[str],
    *,
    shape_profile: Path | None = None,
    runtimes: Sequence[str] | None = None,
    kernels: bool = False,
) -> BenchReport:
    """Bench the model locally at the values of ``shapes`` (``--shape`` texts; default the
    buckets plus off-bucket values) or at a shape profile's representative values."""
    from database import TuneFarmDatabase
    from tuner.bench.results import traffic_summary
    from tuner.bench.run import bench, sweep_values
    from tuner.symbolic.buckets import (
        choose_buckets,
        parse_shape_options,
        symbolic_vars,
        upper_bounds,
    )

    if shape_profile is not None and shapes:
        raise TuneFarmError("give --shape or --shape-profile, not both")
    tgt = source.resolve_target()
    given = parse_shape_options(list(shapes))
    storage = source.storage(create=False)
    loaded = source.load()
    profile = weights = None
    if shape_profile is not None:
        profile = load_checked_profile(shape_profile, loaded.mod)
        names = symbolic_vars(loaded.mod)
        profile.require(names)
        picked = profile.representatives()
        at = [{n: s[n] for n in names} for s, _ in picked]
        weights = [w for _, w in picked]
    else:
        bounds = upper_bounds(loaded.mod)
        values = {
            name: given.get(name) or sweep_values(buckets, bounds.get(name))
            for name, buckets in choose_buckets(loaded.mod, given, loaded.shape_vars).items()
        }
        at = [
            dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())
        ]
    results = bench(
        loaded,
        tgt,
        TuneFarmDatabase(storage),
        at,
        runtimes=runtimes,
        traffic=profile.marginals() if profile is not None else None,
        kernels=kernels,
    )
    traffic = None
    if profile is not None and weights is not None:
        traffic = traffic_summary(results, weights, f"{shape_profile} ({profile.describe()})")
    return BenchReport(
        model=source.path.name,
        target=tgt.kind.name,
        reference=loaded.reference.name if loaded.reference is not None else None,
        results=tuple(results),
        traffic=traffic,
    )
