"""``tunefarm plan`` (buckets and trials from a shape profile) and ``tunefarm profile record``.

Registered on the root app by :func:`register`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import (
    ArchOpt,
    CostModelOpt,
    DbOpt,
    EntryOpt,
    KeepParamsOpt,
    ModelArg,
    SeedOpt,
    TargetOpt,
    check_model_file,
    check_output_file,
    console,
    open_storage,
    user_errors,
)
from tuner.errors import TuneFarmError
from tuner.progress import fmt_sec

ShapeProfileOpt = Annotated[
    Path | None,
    typer.Option(
        "--shape-profile",
        help="Observed values of the symbolic dims: CSV var,value,count (one variable) or "
        'VAR1,VAR2,count (joint tuples), or JSON {"s": {"17": 1200}} (see '
        "docs/symbolic-shapes.md).",
    ),
]

StagesOpt = Annotated[
    int,
    typer.Option(
        "--stages",
        help="With --shape-profile: spend the budget in this many stages, each re-planned from "
        "what the earlier ones measured (1: the first plan only).",
    ),
]

profile_app = typer.Typer(
    help="Shape profiles: histograms of the symbolic dims' values in production traffic.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
    app.add_typer(profile_app, name="profile")


def load_checked_profile(path: Path, mod: Any) -> Any:
    """``--shape-profile FILE`` read and checked against the model (one-line errors)."""
    from tuner.symbolic.profile import load_profile

    return load_profile(path).for_model(mod)


def make_plan(
    model: Path,
    profile_path: Path,
    trials: int,
    target: str,
    arch: str | None,
    db: str | None,
    entry: str,
    keep_params: bool,
) -> tuple[Any, Any, Any, Any, Any]:
    """(loaded model, target, storage, profile, plan) for ``plan`` and ``tune
    --shape-profile``."""
    from tuner.model import load_model
    from tuner.symbolic.profile import load_profile
    from tuner.targets import resolve_target

    if trials < 1:
        raise TuneFarmError(f"--trials must be at least 1 (got {trials})")
    check_model_file(model)
    profile = load_profile(profile_path)  # before the model: a bad file fails fast
    tgt = resolve_target(target, arch)
    storage = open_storage(db)
    loaded = load_model(model, entry, keep_params=keep_params)
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
        from tuner.bench import time_build

        checked = profile.for_model(loaded.mod)  # INPUT.AXIS names resolved
        values = sorted({s[planner.var] for s, _ in checked.representatives(CALIBRATION_VALUES)})
        shapes = [{planner.var: v} for v in values]
        timed = time_build(loaded, tgt, db, shapes, repeat=5, traffic=checked.marginals())
        measured = dict(zip(values, timed, strict=True))
    return planner.plan(trials, new_only=new_only, measured=measured)


# the build is timed at this many of the profile's values between stages (a stratum each)
CALIBRATION_VALUES = 8


def plan_tables(plan: Any) -> list[Any]:
    """The plan as rich tables: buckets (traffic, latency now and planned), then tasks."""
    var = plan.var
    buckets = Table(
        title=f"plan: buckets {var}={','.join(map(str, plan.buckets))}, "
        f"{plan.trials} of {plan.budget} trials"
    )
    for col in ("values", "traffic", "untuned", "now", "planned", "gain"):
        buckets.add_column(col, justify="left" if col == "values" else "right")
    lo = 1
    for row in plan.rows:
        span = f"{var} > {lo - 1}" if row.value is None else f"{var}={lo}..{row.value}"
        lo = (row.value or 0) + 1
        if row.share == 0:
            buckets.add_row(span, "0%", "-", "-", "-", "-")
            continue
        gain = f"{row.before_sec / row.after_sec:.2f}x" if row.after_sec else "-"
        buckets.add_row(
            span,
            f"{row.share:.1%}",
            fmt_sec(row.untuned_sec),
            fmt_sec(row.before_sec),
            fmt_sec(row.after_sec),
            gain,
        )
    buckets.add_row(
        "[bold]traffic mean[/bold]",
        "100%",
        fmt_sec(plan.untuned_sec),
        fmt_sec(plan.before_sec),
        fmt_sec(plan.after_sec),
        f"{plan.before_sec / plan.after_sec:.2f}x" if plan.after_sec else "-",
    )
    tasks = Table(title="trials per task (records after the job; the default schedule counts)")
    for col in ("task", "calls", "recorded", "trials", "now", "planned", "why"):
        tasks.add_column(col, justify="left" if col in ("task", "why") else "right")
    for t in plan.tasks:
        tasks.add_row(
            escape(t.name),
            str(t.calls),
            str(t.recorded),
            str(t.trials),
            fmt_sec(t.before_sec),
            fmt_sec(t.after_sec),
            escape(t.why),
        )
    return [buckets, tasks]


def plan_notes(plan: Any) -> list[str]:
    curve = plan.curve
    lines = [
        f"gain per trial, over every history: best/default = {curve.floor:.3f} + "
        f"{1 - curve.floor:.3f} * exp(-(t-1)/{curve.tau:g}) ({curve.source}); a task follows "
        "its family's measured curve where it has one, else its class's (matmul-like, "
        "reduction, injective) with its own roofline as floor"
    ]
    for label, sec in plan.alternatives:
        what = fmt_sec(sec) if sec is not None else "not feasible with this budget"
        lines.append(
            f"predicted traffic mean with {label}: {what} (planned: {fmt_sec(plan.after_sec)})"
        )
    lines += list(plan.notes)
    cal = plan.calibration
    if cal is None:
        lines.append("predicted figures are kernel time (VM and dispatch overheads not modelled)")
    else:
        factors = cal.factors()
        spread = f"{min(factors):.2f}-{max(factors):.2f}x" if factors else "-"
        lines.append(
            f"calibrated by this database's build, timed at {len(cal.values)} values "
            f"({plan.var}={cal.values[0]}..{cal.values[-1]}): its kernels ran at {spread} the "
            f"model's time, and {fmt_sec(min(cal.rest_sec))}-{fmt_sec(max(cal.rest_sec))} a "
            f"call went outside them; planned with it (kernel time alone: "
            f"{fmt_sec(plan.kernel_after_sec)})"
        )
    return lines


def print_plan(plan: Any) -> None:
    for table in plan_tables(plan):
        console.print(table)
    for line in plan_notes(plan):
        console.print(escape(line))


@user_errors
def plan(
    model: ModelArg,
    shape_profile: Annotated[
        Path,
        typer.Option(
            "--shape-profile",
            help="Observed values of the symbolic dim: CSV var,value,count or JSON "
            '{"s": {"17": 1200}} (see docs/symbolic-shapes.md).',
        ),
    ],
    trials: Annotated[
        int,
        typer.Option(
            "--trials",
            help="Total records of the planned tasks after the job (records already in the "
            "database count, as for tune).",
        ),
    ] = 64,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    run: Annotated[
        bool,
        typer.Option("--tune", help="Run the plan: tune its buckets with its trial split."),
    ] = False,
    address: Annotated[
        str | None, typer.Option("--address", "-a", help="With --tune: the Ray cluster's head.")
    ] = None,
    seed: SeedOpt = None,
    cost_model: CostModelOpt = "tunefarm",
    stages: StagesOpt = 2,
) -> None:
    """Choose the buckets and the trial split per task that minimise the expected latency of
    MODEL over the traffic of a shape profile, from what the database knows; --tune runs it."""
    if run:  # tune runs the plan (and prints it) exactly as tune --shape-profile does
        from tuner.cli.run import tune

        tune(
            model,
            target=target,
            arch=arch,
            trials=trials,
            db=db,
            address=address,
            seed=seed,
            entry=entry,
            keep_params=keep_params,
            as_json=as_json,
            cost_model=cost_model,
            shape_profile=shape_profile,
            stages=stages,
        )
        return
    *_, the_plan = make_plan(model, shape_profile, trials, target, arch, db, entry, keep_params)
    if as_json:
        print(json.dumps(the_plan.to_dict(), indent=2, default=str))
    else:
        print_plan(the_plan)


@profile_app.command("record")
@user_errors
def record(
    source: Annotated[
        Path, typer.Argument(help="A file of input shapes (one model call a line) or a log.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The profile to write (.csv or .json).")
    ],
    model: Annotated[
        Path | None,
        typer.Option("--model", help="The model whose inputs the shapes are (shapes format)."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="shapes: one call a line, each input's shape, ';' between inputs "
            "(17x256 or x:17x256); log: lines holding VAR=VALUE for every --var.",
        ),
    ] = "shapes",
    var: Annotated[
        list[str] | None,
        typer.Option("--var", help="log: a variable to read (repeatable); default the model's."),
    ] = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
) -> None:
    """Write a shape profile from a list of input shapes or a log."""
    from tuner.symbolic.profile import record_log, record_shapes

    if fmt not in ("shapes", "log"):
        raise TuneFarmError(f"--format must be shapes or log (got {fmt!r})")
    check_output_file(output, "--output")
    if source.is_dir() or not source.exists():
        raise TuneFarmError(f"{source}: no such file")
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise TuneFarmError(f"{source}: cannot read it ({type(err).__name__})") from None
    mod = None
    if model is not None:
        from tuner.model import load_model

        check_model_file(model)
        mod = load_model(model, entry, keep_params=keep_params).mod
    if fmt == "shapes":
        if mod is None:
            raise TuneFarmError("--format shapes needs --model (which dims are symbolic)")
        profile = record_shapes(lines, mod, str(source))
    else:
        from tuner.symbolic.buckets import symbolic_vars

        names = list(var or (symbolic_vars(mod) if mod is not None else []))
        profile = record_log(lines, names, str(source))
        if mod is not None:
            profile = profile.for_model(mod)
    profile.write(output)
    console.print(f"wrote {output}: {escape(profile.describe())}")
