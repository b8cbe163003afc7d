"""``tunefarm plan`` (buckets and trials from a shape profile) and ``tunefarm profile record``.

Registered on the root app by :func:`register`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tuner.cli import render
from tuner.cli.common import (
    ArchOpt,
    CostModelOpt,
    DbOpt,
    EntryOpt,
    JsonOpt,
    KeepParamsOpt,
    ModelArg,
    SeedOpt,
    StagesOpt,
    TargetOpt,
    TuneOptions,
    check_model_file,
    check_output_file,
    console,
    print_json,
    tune_and_print,
    user_errors,
)
from tuner.cluster.address import ray_address
from tuner.errors import TuneFarmError

profile_app = typer.Typer(
    help="Shape profiles: histograms of the symbolic dims' values in production traffic.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add plan and profile record to the ``tunefarm`` app."""
    app.command("plan")(plan)
    app.add_typer(profile_app, name="profile")


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
    as_json: JsonOpt = False,
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
    check_model_file(model)
    opts = TuneOptions(
        target=target,
        arch=arch,
        trials=trials,
        db=db,
        seed=seed,
        entry=entry,
        keep_params=keep_params,
        cost_model=cost_model,
    )
    if run:  # tune runs the plan (and prints it) exactly as tune --shape-profile does
        if stages < 1:
            raise TuneFarmError(f"--stages must be at least 1 (got {stages})")
        tune_and_print(model, opts, ray_address(address), as_json, shape_profile, stages)
        return
    from tuner.services import make_plan

    *_, the_plan = make_plan(opts.source(model), shape_profile, trials)
    if as_json:
        print_json(the_plan.to_dict())
    else:
        render.print_plan(console, the_plan)


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
