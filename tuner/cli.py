"""The ``tunefarm`` command line: thin typer commands over the tuner, workers and database."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from database import DatabaseError, Storage, TuneFarmDatabase, default_url
from tuner.errors import TuneFarmError
from tuner.progress import fmt_sec

app = typer.Typer(
    name="tunefarm",
    help="Distributed autotuning of TVM tensor programs into a shared schedule database.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Inspect and manage the schedule database.", no_args_is_help=True)
app.add_typer(db_app, name="db")

# Wide enough for the tables when output goes to a file or a pipe (rich's default is 80).
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
F = TypeVar("F", bound=Callable[..., Any])

ModelArg = Annotated[Path, typer.Argument(help="A TVMScript .py file or an IRModule .json file.")]
TargetOpt = Annotated[
    str,
    typer.Option("--target", "-t", help="Preset (llvm, cuda, arm64) or a TVM target dict as JSON."),
]
ArchOpt = Annotated[
    str | None, typer.Option("--arch", help="CPU (mcpu) or GPU arch (sm_XY) for the preset.")
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="SQLAlchemy URL [default: $TUNEFARM_DB or sqlite:///tunefarm.db]."),
]
EntryOpt = Annotated[str, typer.Option("--entry", help="Name of the IRModule in the file.")]


def user_errors(fn: F) -> F:
    """Turn user-facing errors into one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (TuneFarmError, DatabaseError) as err:
            err_console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/red]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _storage(url: str | None, *, create: bool = True) -> Storage:
    return Storage(url or default_url(), create=create)


@app.command()
@user_errors
def tune(
    model: ModelArg,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    trials: Annotated[int, typer.Option(help="Trial budget for the whole model.")] = 64,
    db: DbOpt = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address; default: start a local instance.")
    ] = None,
    job: Annotated[str | None, typer.Option(help="Job name (default: model and time).")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed of the search.")] = None,
    per_iter: Annotated[int, typer.Option(help="Candidates measured per search round.")] = 64,
    min_repeat_ms: Annotated[int, typer.Option(help="Minimum time of one timed repeat.")] = 50,
    shape: Annotated[
        list[str] | None,
        typer.Option("--shape", help="Buckets of a symbolic dim: VAR=V1,V2,... (repeatable)."),
    ] = None,
    entry: EntryOpt = "Module",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Tune MODEL's kernels on Ray workers and store the best schedules in the database."""
    from tuner.buckets import choose_buckets, parse_shape_options
    from tuner.job import TuneConfig
    from tuner.job import tune as run_tune
    from tuner.model import load_model
    from tuner.targets import resolve_target
    from workers.config import MeasureConfig

    config = TuneConfig(
        trials=trials,
        trials_per_iter=per_iter,
        seed=seed,
        job_name=job,
        measure=MeasureConfig(min_repeat_ms=min_repeat_ms),
    )
    tgt = resolve_target(target, arch)
    loaded = load_model(model, entry)
    buckets = choose_buckets(loaded.mod, parse_shape_options(shape or []), loaded.shape_vars)
    storage = _storage(db)
    summary = run_tune(
        loaded.mod,
        tgt,
        storage,
        config,
        address=address,
        model_name=model.stem,
        console=None if as_json else console,
        buckets=buckets,
    )
    if as_json:
        print(json.dumps(summary.to_dict(), indent=2))
        return
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
    console.print(f"wall time {summary.wall_sec:.1f} s")


@app.command()
@user_errors
def build(
    model: ModelArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the .so.")],
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    strict: Annotated[bool, typer.Option(help="Fail when a kernel has no tuned record.")] = False,
    entry: EntryOpt = "Module",
) -> None:
    """Compile MODEL with the database's best schedules into a Relax VM library."""
    from tuner.compile import compile as tf_compile
    from tuner.model import load_model
    from tuner.targets import resolve_target

    tgt = resolve_target(target, arch)
    loaded = load_model(model, entry)
    storage = _storage(db, create=False)
    if not output.parent.exists():
        raise TuneFarmError(f"output folder does not exist: {output.parent}")
    ex, report = tf_compile(loaded.mod, tgt, TuneFarmDatabase(storage), strict=strict)
    ex.export_library(str(output))
    table = Table(title=f"kernels of {model.name}")
    for col in ("kernel", "calls", "schedule", "lookup", "latency", "dispatch"):
        table.add_column(col, justify="right" if col in ("calls", "latency") else "left")
    styles = {"tuned": "green", "buckets": "green", "untuned": "yellow"}
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


@app.command()
@user_errors
def bench(
    model: ModelArg,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="Values of a symbolic dim to sweep: VAR=V1,V2,... (repeatable); "
            "default: the buckets plus off-bucket values.",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the results as JSON here.")
    ] = None,
    entry: EntryOpt = "Module",
) -> None:
    """Run the untuned build, the tuned build and a numpy reference; compare time and output."""
    import itertools

    from tuner.bench import bench as run_bench
    from tuner.bench import sweep_values
    from tuner.buckets import choose_buckets, parse_shape_options, upper_bounds
    from tuner.model import load_model
    from tuner.targets import resolve_target

    tgt = resolve_target(target, arch)
    loaded = load_model(model, entry)
    given = parse_shape_options(shape or [])
    bounds = upper_bounds(loaded.mod)
    values = {
        name: given.get(name) or sweep_values(buckets, bounds.get(name))
        for name, buckets in choose_buckets(loaded.mod, given, loaded.shape_vars).items()
    }
    shapes = [
        dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())
    ]
    storage = _storage(db, create=False)
    results = run_bench(loaded, tgt, TuneFarmDatabase(storage), shapes)
    table = Table(title=f"{model.name} on {tgt.kind.name}: tuned vs untuned default vs numpy")
    cols = ["shape", "untuned", "tuned", "speedup", "numpy", "tuned/numpy", "max err", "kernels"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("shape", "kernels") else "right")
    for r in results:
        label = ",".join(f"{k}={v}" for k, v in r.shape.items()) or "static"
        variants = ", ".join(f"{k}:{v}" for k, v in r.kernels.items()) or "-"
        table.add_row(
            label,
            fmt_sec(r.untuned_sec),
            fmt_sec(r.tuned_sec),
            f"{r.speedup:.2f}x",
            fmt_sec(r.numpy_sec),
            f"{r.vs_numpy:.2f}x" if r.vs_numpy else "-",
            f"{r.max_abs_err:.1e}" + ("" if r.agree else " [red]DISAGREE[/red]"),
            escape(variants),
        )
    console.print(table)
    res = results[0]
    console.print(
        f"outputs checked against the {res.reference} reference; "
        f"{res.tuned_share:.0%} of kernel calls tuned"
        + (f" (untuned: {', '.join(res.untuned_kernels)})" if res.untuned_kernels else "")
    )
    if json_out is not None:
        json_out.write_text(json.dumps({"results": [r.to_dict() for r in results]}, indent=2))
    if not all(r.agree for r in results):
        raise typer.Exit(2)


@db_app.command("stats")
@user_errors
def db_stats(
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Counts of workloads, tuning records (valid and failed), jobs and targets."""
    from database.queries import stats

    data = stats(_storage(db, create=False))
    if as_json:
        print(json.dumps(data))
        return
    table = Table(title="schedule database")
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("workloads", "records", "valid_records", "failed_records", "jobs", "targets"):
        table.add_row(key.replace("_", " "), str(data[key]))
    console.print(table)


def main() -> None:
    """Entry point of the ``tunefarm`` script."""
    if os.environ.get("TUNEFARM_DEBUG"):
        app()
        return
    try:
        app()
    except SystemExit:
        raise
    except Exception as err:
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        detail = lines[-1] if lines else ""
        print(
            f"error: {type(err).__name__}: {detail} (set TUNEFARM_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
