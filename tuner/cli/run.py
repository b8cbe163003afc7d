"""``tunefarm tune / build / bench``: the per-model commands, thin over :mod:`tuner.job`,
:mod:`tuner.compile` and :mod:`tuner.bench`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli import cluster as cli_cluster
from tuner.cli import plan as cli_plan
from tuner.cli.common import (
    ArchOpt,
    CostModelOpt,
    DbOpt,
    EntryOpt,
    ExchangeOpt,
    GainOpt,
    JobOpt,
    KeepParamsOpt,
    MinRepeatOpt,
    ModelArg,
    PerIterOpt,
    ScreenOpt,
    SearchOpt,
    SeedOpt,
    ShapeOpt,
    SiblingsOpt,
    TargetOpt,
    TimeBudgetOpt,
    TransferOpt,
    TrialsOpt,
    TuneAddressOpt,
    UntilConvergedOpt,
    check_model_file,
    check_output_file,
    check_tune_options,
    console,
    converge_gain,
    open_storage,
    parse_duration,
    user_errors,
)
from tuner.cli.render import LiveProgress, kernel_profile_table
from tuner.cluster.address import ray_address
from tuner.errors import TuneFarmError
from tuner.progress import LineProgress, fmt_sec

if TYPE_CHECKING:
    from tuner.job import JobSummary


def tune(
    model: ModelArg,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    trials: TrialsOpt = 64,
    db: DbOpt = None,
    address: TuneAddressOpt = None,
    job: JobOpt = None,
    seed: SeedOpt = None,
    per_iter: PerIterOpt = 64,
    min_repeat_ms: MinRepeatOpt = 50,
    screen: ScreenOpt = 2.0,
    shape: ShapeOpt = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    cost_model: CostModelOpt = "tunefarm",
    transfer: TransferOpt = False,
    siblings: SiblingsOpt = 4,
    exchange: ExchangeOpt = False,
    shape_profile: cli_plan.ShapeProfileOpt = None,
    search: SearchOpt = "auto",
    stages: cli_plan.StagesOpt = 2,
    time_budget: TimeBudgetOpt = None,
    until_converged: UntilConvergedOpt = False,
    gain: GainOpt = 0.02,
) -> None:
    """Tune MODEL's kernels on Ray workers and store the best schedules in the database.

    With --shape-profile, the buckets and the trials per task are the plan's (tunefarm plan),
    re-planned between --stages from the measurements."""
    from tuner.job import TuneConfig
    from tuner.job import tune as run_tune
    from tuner.model import load_model
    from tuner.symbolic.buckets import choose_buckets, parse_shape_options
    from tuner.targets import resolve_target
    from workers.config import MeasureConfig

    check_tune_options(trials, per_iter, min_repeat_ms, siblings, screen)
    time_budget_sec = parse_duration("--time-budget", time_budget)
    check_model_file(model)
    if shape_profile is not None and shape:
        raise TuneFarmError("give --shape or --shape-profile, not both")
    if stages < 1:
        raise TuneFarmError(f"--stages must be at least 1 (got {stages})")
    given = parse_shape_options(shape or [])
    ray_addr = ray_address(address)  # before loading the model or creating a job
    config = TuneConfig(
        trials=trials,
        trials_per_iter=per_iter,
        seed=seed,
        job_name=job,
        measure=MeasureConfig(min_repeat_ms=min_repeat_ms, screen=screen),
        cost_model=cost_model,
        transfer=transfer,
        siblings=siblings,
        exchange=exchange,
        search=search,
        time_budget_sec=time_budget_sec,
        until_converged=converge_gain(until_converged, gain),
    )
    if shape_profile is not None:
        _tune_planned(
            model,
            shape_profile,
            stages,
            config,
            target,
            arch,
            db,
            entry,
            keep_params,
            ray_addr,
            as_json,
        )
        return
    tgt = resolve_target(target, arch)
    with ray_while_loading(
        model, ray_addr, lambda: load_model(model, entry, keep_params=keep_params)
    ) as loading:
        loaded = loading()
        buckets = choose_buckets(loaded.mod, given, loaded.shape_vars)
        storage = open_storage(db)
        summary = run_tune(
            loaded.mod,
            tgt,
            storage,
            config,
            address=ray_addr,
            model_name=model.stem,
            progress=None
            if as_json
            else LiveProgress(console)
            if console.is_terminal
            else LineProgress(),
            buckets=buckets,
        )
    if as_json:
        print(json.dumps(summary.to_dict(), indent=2, default=str))
        return
    print_tune_summary(summary)


# model files whose import takes seconds (torch and its exporter, ONNX): Ray starts meanwhile
SLOW_LOADS = (".pt2", ".onnx")


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


def stage_budgets(new_trials: int, stages: int) -> list[int]:
    """``new_trials`` split into ``stages`` near-equal parts (earlier stages the larger),
    none empty."""
    stages = max(1, min(stages, new_trials))
    return [new_trials // stages + (i < new_trials % stages) for i in range(stages)]


def _tune_planned(
    model: Path,
    profile_path: Path,
    stages: int,
    config: Any,
    target: str,
    arch: str | None,
    db: str | None,
    entry: str,
    keep_params: bool,
    address: str | None,
    as_json: bool,
) -> None:
    """``tune --shape-profile``: the plan's buckets and split, in ``stages`` jobs that share
    the new trials the first plan would add; each stage after the first is re-planned from
    the database, so it sees the measured defaults, bests, tiles and gain curves of the
    earlier ones. A stage whose budget cannot measure one bucket's defaults passes its
    trials on to the next."""
    from dataclasses import replace

    from tuner.job import tune as run_tune
    from workers.connection import RayConnection

    loaded, tgt, storage, profile, first = cli_plan.make_plan(
        model, profile_path, config.trials, target, arch, db, entry, keep_params
    )
    total = sum(max(0, t.trials - t.recorded) for t in first.tasks)
    budgets = stage_budgets(total, stages) if total else [0]
    done: list[tuple[Any, Any]] = []
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
                    plan = cli_plan.replan(
                        loaded, tgt, storage, profile, want, new_only=True, measure=bool(done)
                    )
                except TuneFarmError:
                    if last:
                        raise
                    carried += share
                    continue
                carried = 0
            if not as_json:
                if len(budgets) > 1:
                    console.print(f"[bold]stage {i + 1} of {len(budgets)}[/bold]")
                cli_plan.print_plan(plan)
            stage_config = replace(
                config,
                trials=plan.trials,
                task_trials=plan.task_trials(),
                job_name=f"{config.job_name}-{i + 1}" if config.job_name and i else config.job_name,
                time_budget_sec=None if time_left is None else max(time_left, 1e-3),
            )
            summary = run_tune(
                loaded.mod,
                tgt,
                storage,
                stage_config,
                address=address,
                model_name=model.stem,
                progress=None
                if as_json
                else LiveProgress(console)
                if console.is_terminal
                else LineProgress(),
                buckets={plan.var: list(plan.buckets)},
            )
            spent += summary.trials_measured
            done.append((plan, summary))
            if not as_json:
                print_tune_summary(summary)
    if as_json:
        out = {
            "plan": done[-1][0].to_dict(),
            "trials_measured": sum(s.trials_measured for _, s in done),
            "wall_sec": sum(s.wall_sec for _, s in done),
            "stages": [{**s.to_dict(), "plan": p.to_dict()} for p, s in done],
        }
        print(json.dumps(out, indent=2, default=str))


def print_tune_summary(summary: JobSummary) -> None:
    """A finished job: per task trials, best latency and speedup, then budget and wall time."""
    table = Table(title=f"job {summary.job_name} (#{summary.job_id})")
    for col in ("task", "calls", "trials", "best latency", "GFLOPS", "untuned", "speedup"):
        table.add_column(col, justify="left" if col == "task" else "right", overflow="fold")
    for t in summary.tasks:
        table.add_row(
            escape(t.name),
            str(t.weight),
            str(t.trials),
            fmt_sec(t.best_sec),
            f"{t.gflops:.2f}" if t.gflops else "-",
            fmt_sec(t.baseline_sec),
            f"{t.speedup:.1f}x" if t.speedup else "-",
        )
    console.print(table)
    if summary.trials_before >= summary.trials_budget:
        console.print(
            f"budget of {summary.trials_budget} trials already spent "
            f"({summary.trials_before} recorded); nothing new measured"
        )
    elif summary.trials_before:
        console.print(
            f"resumed: {summary.trials_before} trials already in the database, "
            f"{summary.trials_measured} measured now"
        )
    for name in summary.skipped:
        console.print(f"[yellow]skipped[/yellow] {name}")
    converged = sum(t.converged for t in summary.tasks)
    if converged:
        console.print(
            f"converged: {converged} of {len(summary.tasks)} task(s) (expected gain below "
            f"--gain), {summary.trials_measured} trials measured"
        )
    if summary.stopped_by == "time_budget":
        console.print(
            f"time budget reached: {summary.trials_measured} of "
            f"{summary.trials_budget - summary.trials_before} trials measured"
        )
    share = summary.db_sec / summary.wall_sec if summary.wall_sec else 0.0
    console.print(
        f"wall time {summary.wall_sec:.1f} s (database {summary.db_sec:.2f} s, {share:.1%})"
    )
    search = summary.search
    if search.get("mode") == "thread":
        console.print(
            f"search: pipelined in a driver thread, {search['rounds']} rounds, "
            f"{search['actor_busy_sec']:.1f} s of search, driver waited {search['wait_sec']:.1f} s"
        )
    elif search.get("mode") == "ray":
        console.print(
            f"search: {search['actors']} actor(s) on {search['nodes']} node(s), "
            f"{search['rounds']} rounds, {search['actor_busy_sec']:.1f} s of search off the "
            f"driver, driver waited {search['wait_sec']:.1f} s"
            + (f", {search['restarts']} actor restart(s)" if search["restarts"] else "")
        )
    if search.get("sibling_tasks"):
        console.print(
            f"warm start: {search['sibling_tasks']} of {len(summary.tasks)} task(s) began with "
            f"{search['siblings']} of the database's best schedules of their kernel at other "
            "buckets, refitted"
        )
    if search.get("screened"):
        console.print(
            f"screened: {search['screened']} candidate(s) at {search['screen']:g}x their "
            "task's best or slower, timed by their single runs alone"
        )
    devices = summary.devices
    if devices.get("busy") is not None:
        console.print(
            f"devices busy measuring {devices['busy']:.0%} of the {devices['window_sec']:.1f} s "
            f"with budget left ({devices['slots']} device slot(s))"
        )


def build(
    model: ModelArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the .so.")],
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    strict: Annotated[bool, typer.Option(help="Fail when a kernel has no tuned record.")] = False,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the kernel report as JSON.")
    ] = False,
    shape_profile: cli_plan.ShapeProfileOpt = None,
) -> None:
    """Compile MODEL with the database's best schedules into a Relax VM library.

    With --shape-profile, the kernel that serves values above the largest tuned bucket is
    the one of least expected time over the profile's traffic there."""
    import dataclasses

    from tuner.compile import compile as tf_compile
    from tuner.model import load_model
    from tuner.symbolic.profile import load_profile
    from tuner.targets import resolve_target

    check_model_file(model)
    check_output_file(output, "--output")
    profile = load_profile(shape_profile) if shape_profile is not None else None  # fail fast
    tgt = resolve_target(target, arch)
    storage = open_storage(db, create=False)
    loaded = load_model(model, entry, keep_params=keep_params)
    traffic = profile.for_model(loaded.mod).marginals() if profile is not None else None
    ex, report = tf_compile(loaded.mod, tgt, storage, strict=strict, traffic=traffic)
    ex.export_library(str(output))
    if as_json:
        data = {
            "output": str(output),
            "tuned_calls": report.tuned_calls,
            "total_calls": report.total_calls,
            "tuned_share": report.tuned_share,
            "kernels": [dataclasses.asdict(k) for k in report.kernels],
        }
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"kernels of {model.name}")
    for col in ("kernel", "calls", "schedule", "lookup", "latency", "dispatch"):
        table.add_column(col, justify="right" if col in ("calls", "latency") else "left")
    styles = {"tuned": "green", "buckets": "green", "default": "green", "untuned": "yellow"}
    for k in report.kernels:
        table.add_row(
            k.name,
            str(k.calls),
            f"[{styles[k.source]}]{k.source}[/{styles[k.source]}]",
            k.level or "-",
            fmt_sec(k.mean_sec),
            escape(k.dispatch or "-"),
        )
    console.print(table)
    console.print(
        f"{report.tuned_calls}/{report.total_calls} kernel calls from tuned records "
        f"({report.tuned_share:.0%}); wrote {output}"
    )


def bench(
    model: ModelArg,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="Values of a symbolic dim to sweep: VAR=V1,V2,... or INPUT.AXIS=V1,V2,... "
            "(e.g. input_ids.1=16,64; repeatable; the values of a VAR given twice are "
            "merged); default: the buckets plus off-bucket values.",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Also write the results as JSON to this file; - prints only the JSON.",
        ),
    ] = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            "-a",
            help="The Ray cluster's head (HOST, HOST:6379, ray://HOST:10001, "
            "http://HOST:8265 or auto): measure on the cluster's devices through its runners "
            "instead of this machine's CPU.",
        ),
    ] = None,
    devices: Annotated[
        list[str] | None,
        typer.Option(
            "--devices",
            help="With --address: device kinds to bench, KIND[,KIND] (cpu, cuda, arm64); "
            "default: every kind the cluster has.",
        ),
    ] = None,
    runtimes: Annotated[
        str | None,
        typer.Option(
            "--runtimes",
            help="Other runtimes to time beside TuneFarm, NAME[,NAME] (torch.compile, "
            "onnxruntime) or none; default: those that run the model's format (.pt2: both; "
            ".onnx: onnxruntime), each reported as not run when not installed.",
        ),
    ] = None,
    shape_profile: cli_plan.ShapeProfileOpt = None,
    kernels: Annotated[
        bool,
        typer.Option(
            "--kernels",
            help="Also show where the tuned build's time goes at each shape: its heaviest "
            "kernels, each timed alone, and the VM's own work (the rest).",
        ),
    ] = False,
) -> None:
    """Run the untuned build, the tuned build and the model's reference (numpy for TVMScript,
    PyTorch for .pt2; the untuned build for ONNX); compare time and output. For .pt2 and .onnx
    models also torch.compile and ONNX Runtime (when installed), side by side on the same
    threads. With --address: tuned vs untuned on each device kind of a Ray cluster (--json -
    prints JSON)."""
    import itertools

    check_model_file(model)
    to_stdout = json_out is not None and str(json_out) == "-"
    if json_out is not None and not to_stdout:
        check_output_file(json_out, "--json")
    if address is not None or devices:
        if target != "llvm" or arch:
            raise TuneFarmError(
                "with --address the targets come from the cluster's devices: "
                "use --devices cpu,cuda,arm64 instead of --target/--arch"
            )
        if shape_profile is not None:
            raise TuneFarmError("--shape-profile benches locally; drop --address/--devices")
        cli_cluster.bench_cluster(model, address, devices, db, shape, json_out, entry, keep_params)
        return
    if shape_profile is not None and shape:
        raise TuneFarmError("give --shape or --shape-profile, not both")

    from tuner.bench import (
        RUNTIMES,
        runtime_notes,
        runtimes_table,
        shape_label,
        slower_note,
        sweep_values,
    )
    from tuner.bench import bench as run_bench
    from tuner.model import load_model
    from tuner.symbolic.buckets import choose_buckets, parse_shape_options, upper_bounds
    from tuner.targets import resolve_target

    others = None
    if runtimes is not None:
        others = [n.strip() for n in runtimes.split(",") if n.strip() and n.strip() != "none"]
        unknown = [n for n in others if n not in RUNTIMES]
        if unknown:
            raise TuneFarmError(
                f"--runtimes: unknown runtime(s) {', '.join(unknown)} "
                f"(known: {', '.join(RUNTIMES)}, or none)"
            )
    tgt = resolve_target(target, arch)
    given = parse_shape_options(shape or [])
    storage = open_storage(db, create=False)
    loaded = load_model(model, entry, keep_params=keep_params)
    traffic = weights = None
    if shape_profile is not None:
        from tuner.symbolic.buckets import symbolic_vars

        profile = cli_plan.load_checked_profile(shape_profile, loaded.mod)
        profile.require(symbolic_vars(loaded.mod))
        picked = profile.representatives()
        shapes = [{n: s[n] for n in symbolic_vars(loaded.mod)} for s, _ in picked]
        weights = [w for _, w in picked]
    else:
        bounds = upper_bounds(loaded.mod)
        values = {
            name: given.get(name) or sweep_values(buckets, bounds.get(name))
            for name, buckets in choose_buckets(loaded.mod, given, loaded.shape_vars).items()
        }
        shapes = [
            dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())
        ]
    from database import TuneFarmDatabase

    results = run_bench(
        loaded,
        tgt,
        TuneFarmDatabase(storage),
        shapes,
        runtimes=others,
        traffic=profile.marginals() if shape_profile is not None else None,
        kernels=kernels,
    )
    if weights is not None:
        from tuner.bench import traffic_summary

        traffic = traffic_summary(results, weights, f"{shape_profile} ({profile.describe()})")
    if to_stdout:
        out = {"results": [r.to_dict() for r in results]}
        if traffic is not None:
            out["traffic"] = traffic.to_dict()
        print(json.dumps(out, indent=2))
        if not all(r.agree for r in results):
            raise typer.Exit(2)
        return
    ref = loaded.reference.name if loaded.reference is not None else None
    title = f"{model.name} on {tgt.kind.name}: tuned vs untuned default"
    table = Table(title=title + (f" vs {ref}" if ref else ""))
    cols = ["shape", "untuned", "tuned", "speedup"]
    cols += [ref, f"tuned/{ref}"] if ref else []
    cols += ["max err", "kernels"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("shape", "kernels") else "right")
    for r in results:
        label = shape_label(r.shape)
        variants = ", ".join(f"{k}:{v}" for k, v in r.kernels.items()) or "-"
        speedup = escape(r.speedup_label)
        row = [
            label,
            fmt_sec(r.untuned_sec),
            fmt_sec(r.tuned_sec),
            f"[red]{speedup}[/red]" if r.slower else speedup,
        ]
        if ref:
            row += [fmt_sec(r.reference_sec), f"{r.vs_reference:.2f}x" if r.vs_reference else "-"]
        row += [f"{r.max_abs_err:.1e}" + ("" if r.agree else " [red]DISAGREE[/red]")]
        table.add_row(*row, escape(variants))
    console.print(table)
    note = slower_note(results)
    if note:
        console.print(f"[red]{escape(note)}[/red]")
    side = runtimes_table(results, model.name)
    if side is not None:
        console.print(side)
    for line in runtime_notes(results):
        console.print(escape(line), style="red" if "MISMATCH" in line else None)
    res = results[0]
    console.print(
        f"outputs checked against the {res.reference} reference; "
        f"{res.tuned_share:.0%} of kernel calls tuned"
        + (f" (untuned: {', '.join(res.untuned_kernels)})" if res.untuned_kernels else "")
    )
    if traffic is not None:
        from tuner.bench import traffic_table

        console.print(traffic_table(traffic, model.name))
    for r in results:
        if r.profile is not None:
            title = f"{model.name} tuned at {shape_label(r.shape)}"
            console.print(kernel_profile_table(r.profile, title))
    if json_out is not None:  # a checked file path (- returned above)
        out = {"results": [r.to_dict() for r in results]}
        if traffic is not None:
            out["traffic"] = traffic.to_dict()
        json_out.write_text(json.dumps(out, indent=2))
    if not all(r.agree for r in results):
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add tune, build and bench to the ``tunefarm`` app."""
    for fn in (tune, build, bench):
        app.command(name=fn.__name__)(user_errors(fn))
