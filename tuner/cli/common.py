"""Pieces shared by the ``tunefarm`` command modules: consoles, options, error handling."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click_errors  # typer 0.29 vendors click as _click
from typer.core import TyperGroup, TyperOption

from database import DatabaseError, Storage
from tuner.cli.checks import (  # noqa: F401 (the commands' checks, one import away)
    check_library_output,
    check_model_file,
    check_output_file,
    check_range,
    parse_duration,
)
from tuner.cluster.address import ADDRESS_FORMS
from tuner.errors import JobInterrupted, TuneFarmError

if TYPE_CHECKING:
    from tuner.job import TuneConfig

# Wide enough for the tables when output goes to a file or a pipe (rich's default is 80).
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
F = TypeVar("F", bound=Callable[..., Any])
# `-h` as well as `--help` on every command (sub-apps inherit the root's context settings)
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """No type column for a flag: ``--json`` takes no value, so no ``<bool>`` beside it."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

ModelArg = Annotated[
    Path,
    typer.Argument(
        help="A TVMScript .py file, an IRModule .json, an ONNX .onnx or a torch.export .pt2 file."
    ),
]
TargetOpt = Annotated[
    str,
    typer.Option("--target", "-t", help="Preset (llvm, cuda, arm64) or a TVM target dict as JSON."),
]
ArchOpt = Annotated[
    str | None, typer.Option("--arch", help="CPU (mcpu) or GPU arch (sm_XY) for the preset.")
]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL.", show_default="$TUNEFARM_DB or sqlite:///tunefarm.db"
    ),
]
EntryOpt = Annotated[str, typer.Option("--entry", help="Name of the IRModule in the file.")]
KeepParamsOpt = Annotated[
    bool,
    typer.Option(
        "--keep-params",
        help="ONNX/.pt2: keep the weights as inputs of main instead of binding them as "
        "constants (use the same choice for tune, build and bench).",
    ),
]


def user_errors(fn: F) -> F:
    """Turn user-facing errors into one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JobInterrupted as err:
            err_console.print(f"[red]interrupted:[/red] {escape(str(err))}", highlight=False)
            raise typer.Exit(130) from None
        except (TuneFarmError, DatabaseError) as err:
            err_console.print(
                f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/red]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def open_storage(url: str | None, *, create: bool = True) -> Storage:
    return Storage(url, create=create)  # None: $TUNEFARM_DB (named in errors) or the default


def print_json(data: Any) -> None:
    """The one ``--json`` convention: the command's result as JSON on stdout, nothing else."""
    import json

    print(json.dumps(data, indent=2, default=str))


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
OutputJsonOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Also write the results as JSON to this file."),
]


class CompactGroup(TyperGroup):
    """The root command group: usage errors (exit code 2) as one ``error: ...`` line."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as err:  # the help is printed already
            sys.exit(err.exit_code)
        except click_errors.ClickException as err:
            sys.exit(_usage_error(err))
        except typer.Abort:  # typer 0.29 vendors click without its Abort
            err_console.print("[red]error:[/red] aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _usage_error(err: click_errors.ClickException) -> int:
    """Print a click error as one line; its exit code (2 for usage errors)."""
    text = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    if ctx is not None and ctx.command.get_help_option(ctx) is not None:
        text = f"{text.rstrip('. ')} (try '{ctx.command_path} {ctx.help_option_names[0]}')"
    err_console.print(f"[red]error:[/red] {escape(text)}", highlight=False, soft_wrap=True)
    return err.exit_code


# Options of a tune job, shared by `tune` and `submit` (which forwards them to `tune`).
TrialsOpt = Annotated[int, typer.Option(help="Trial budget for the whole model.")]
JobOpt = Annotated[str | None, typer.Option(help="Job name (default: model and time).")]
SeedOpt = Annotated[int | None, typer.Option(help="Random seed of the search.")]
PerIterOpt = Annotated[int, typer.Option(help="Candidates measured per search round.")]
MinRepeatOpt = Annotated[
    int, typer.Option("--min-repeat-ms", help="Minimum time of one timed repeat, in ms.")
]
CacheFlushOpt = Annotated[
    bool,
    typer.Option(
        "--cache-flush",
        help="Time every run cold: the kernel's inputs (all but the first) flushed from the "
        "CPU caches before it, one run a repeat, as a decoder's weights are at every token "
        "when the model is larger than the caches.",
    ),
]
ScreenOpt = Annotated[
    float,
    typer.Option(
        "--screen",
        help="Time a candidate by its first single runs alone when they are all at least "
        "this many times its task's best so far (0: time every candidate in full).",
    ),
]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--shape",
        help="Buckets of a symbolic dim: VAR=V1,V2,... or INPUT.AXIS=V1,V2,... for the "
        "variable at that axis of an input (e.g. input_ids.1=16,64; repeatable; the values "
        "of a VAR given twice are merged: --shape b=1 --shape b=8 is b=1,8).",
    ),
]
TuneAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        "-a",
        help=f"The Ray cluster's head: {ADDRESS_FORMS}, or auto; joined through its GCS.",
        show_default="start a local Ray instance",
    ),
]
TransferOpt = Annotated[
    bool,
    typer.Option(
        "--transfer",
        help="Seed each bucket's search with the best schedules of the kernel's other buckets "
        "(tile sizes refitted).",
    ),
]
SiblingsOpt = Annotated[
    int,
    typer.Option(
        "--siblings",
        help="A task new to the database first measures this many of its kernel's best "
        "schedules at other buckets, tile sizes refitted (0: none).",
    ),
]
ExchangeOpt = Annotated[
    bool,
    typer.Option(
        "--exchange",
        help="Start each later round of a bucket's search with the kernel's new best at the "
        "nearest other bucket, tile sizes refitted.",
    ),
]
MatvecOpt = Annotated[
    bool,
    typer.Option(
        "--matvec/--no-matvec",
        help="A CPU matrix-vector product (a decoder's projections at one token) first "
        "measures a known tiling (a column block per core, eight weight rows at a time).",
    ),
]
GemmOpt = Annotated[
    bool,
    typer.Option(
        "--gemm/--no-gemm",
        help="A CPU matrix product (a prompt's projections) first measures a known tiling (a "
        "column band per core, half the vector registers accumulating).",
    ),
]
SearchOpt = Annotated[
    str,
    typer.Option(
        "--search",
        help="Where the search runs: ray (each task in a search actor, rounds pipelined with "
        "builds), thread (the same pipelined rounds in a thread of this process), driver "
        "(MetaSchedule's task loop here, rounds one after the other) or auto (ray on a "
        "cluster of several CPU nodes or for a GPU/ARM device, else thread).",
    ),
]
TimeBudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--time-budget",
        help="Stop the search after this long from the job's start (90s, 10m, 1h30m; plain "
        "numbers are seconds), whatever is left of --trials; the job then ends as usual.",
        show_default="no limit",
    ),
]
UntilConvergedOpt = Annotated[
    bool,
    typer.Option(
        "--until-converged",
        help="Stop each task once the gain it may still find (from its best-so-far curve and "
        "its timings' noise) is below --gain; its share goes to the tasks still improving. "
        "--trials and --time-budget stay hard caps.",
    ),
]
GainOpt = Annotated[
    float,
    typer.Option(
        "--gain",
        help="With --until-converged: the expected gain, a fraction of a task's best, below "
        "which a task is converged.",
    ),
]
RetimeOpt = Annotated[
    int,
    typer.Option(
        "--retime",
        help="At the end of the job, re-time each task's N best schedules side by side on "
        "the runner and record every run; a challenger replaces the best only when faster "
        "with confidence. 0: off.",
    ),
]
CostModelOpt = Annotated[
    str, typer.Option("--cost-model", help="Cost model: tunefarm, xgb (stock) or random.")
]
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

MAX_TRIALS = 1_000_000  # a budget beyond any search this service runs: a typo
MAX_SEED = 2**31 - 1  # MetaSchedule's random engine takes a 32-bit signed seed
MAX_RETIME = 16  # schedules re-timed per task: each costs rounds x a measurement
MAX_REPEAT_MS = 60_000


@dataclass(frozen=True)
class TuneOptions:
    """The options of a tune job, declared once: ``tune`` and ``submit`` (which forwards them
    to ``tune`` on the cluster) take them all (:func:`with_tune_options`). Validated at
    construction, before anything starts: one line naming the option."""

    target: TargetOpt = "llvm"
    arch: ArchOpt = None
    trials: TrialsOpt = 64
    db: DbOpt = None
    job: JobOpt = None
    seed: SeedOpt = None
    per_iter: PerIterOpt = 64
    min_repeat_ms: MinRepeatOpt = 50
    cache_flush: CacheFlushOpt = False
    screen: ScreenOpt = 2.0
    shape: ShapeOpt = None
    entry: EntryOpt = "Module"
    keep_params: KeepParamsOpt = False
    cost_model: CostModelOpt = "tunefarm"
    transfer: TransferOpt = False
    siblings: SiblingsOpt = 4
    exchange: ExchangeOpt = False
    matvec: MatvecOpt = True
    gemm: GemmOpt = True
    time_budget: TimeBudgetOpt = None
    until_converged: UntilConvergedOpt = False
    gain: GainOpt = 0.02
    retime: RetimeOpt = 3

    def __post_init__(self) -> None:
        _check_int("--trials", self.trials, 1, MAX_TRIALS)
        _check_int("--per-iter", self.per_iter, 1, MAX_TRIALS)
        _check_int("--min-repeat-ms", self.min_repeat_ms, 0, MAX_REPEAT_MS, "milliseconds")
        _check_int("--siblings", self.siblings, 0, MAX_TRIALS)
        _check_int("--retime", self.retime, 0, MAX_RETIME)
        if self.seed is not None:
            _check_int("--seed", self.seed, 0, MAX_SEED)
        if not (self.screen == 0 or 1 <= self.screen < math.inf):
            raise TuneFarmError(f"--screen must be 0 (off) or at least 1 (got {self.screen:g})")
        parse_duration("--time-budget", self.time_budget)
        if not (math.isfinite(self.gain) and 0 < self.gain < 1):
            raise TuneFarmError(f"--gain must be between 0 and 1, exclusive (got {self.gain:g})")

    @property
    def time_budget_sec(self) -> float | None:
        return parse_duration("--time-budget", self.time_budget)

    def source(self, model: Path) -> Any:
        """The model as :mod:`tuner.services` reads it (:class:`~tuner.services.ModelSource`)."""
        from tuner.services import ModelSource

        return ModelSource(model, self.target, self.arch, self.db, self.entry, self.keep_params)

    def config(self, search: str = "auto") -> TuneConfig:
        """The job's :class:`~tuner.job.TuneConfig`."""
        from tuner.job import TuneConfig
        from workers.config import MeasureConfig

        return TuneConfig(
            trials=self.trials,
            trials_per_iter=self.per_iter,
            seed=self.seed,
            job_name=self.job,
            measure=MeasureConfig(
                min_repeat_ms=self.min_repeat_ms, cache_flush=self.cache_flush, screen=self.screen
            ),
            cost_model=self.cost_model,
            transfer=self.transfer,
            siblings=self.siblings,
            exchange=self.exchange,
            matvec=self.matvec,
            gemm=self.gemm,
            search=search,
            time_budget_sec=self.time_budget_sec,
            until_converged=self.gain if self.until_converged else None,
            retime=self.retime,
        )

    def flags(self) -> dict[str, Any]:
        """``--flag: value`` of every option, as ``tune`` reads them (``submit`` forwards these)."""
        return {
            _flag_of(f.name): getattr(self, f.name) if f.name != "shape" else self.shape or []
            for f in dataclasses.fields(self)
        }


def tune_and_print(
    model: Path,
    opts: TuneOptions,
    address: str | None,
    as_json: bool,
    shape_profile: Path | None,
    stages: int,
    search: str = "auto",
) -> None:
    """Tune, at the given buckets or (with ``shape_profile``) as planned, and print it
    (``tune``, and ``plan --tune``)."""
    from tuner import services
    from tuner.cli import render

    config = opts.config(search)
    from tuner.progress import JobProgress, LineProgress

    def progress() -> JobProgress | None:
        if as_json:
            return None
        return render.LiveProgress(console) if console.is_terminal else LineProgress()

    if shape_profile is None:
        summary = services.tune_model(
            opts.source(model), config, opts.shape or [], address=address, progress=progress
        )
        if as_json:
            print_json(summary.to_dict())
        else:
            render.print_tune_summary(console, summary)
        return

    def show_plan(plan: object, stage: int, of: int) -> None:
        if not as_json:
            if of > 1:
                console.print(f"[bold]stage {stage} of {of}[/bold]")
            render.print_plan(console, plan)

    run = services.tune_planned(
        opts.source(model),
        shape_profile,
        stages,
        config,
        address=address,
        progress=progress,
        on_plan=show_plan,
        on_summary=(lambda s: None)
        if as_json
        else (lambda s: render.print_tune_summary(console, s)),
    )
    if as_json:
        print_json(run.to_dict())


def _check_int(flag: str, value: int, low: int, high: int, unit: str = "") -> None:
    """``value`` in [low, high], else one line naming ``flag``."""
    unit = f" {unit}" if unit else ""
    if value < low:
        need = "0 or more" if low == 0 else f"at least {low}"
        raise TuneFarmError(f"{flag} must be {need}{unit} (got {value})")
    if value > high:
        raise TuneFarmError(f"{flag} must be at most {high:,}{unit} (got {value:,})")


def _flag_of(field: str) -> str:
    """The command-line flag of a :class:`TuneOptions` field (``per_iter`` -> ``--per-iter``)."""
    info = get_type_hints(TuneOptions, include_extras=True)[field].__metadata__[0]
    # in Annotated, typer keeps the first declaration where a default would go
    decls = [*info.param_decls, *([info.default] if isinstance(info.default, str) else [])]
    longs = [d for d in decls if d.startswith("--")]
    return longs[0] if longs else "--" + field.replace("_", "-")


def with_tune_options(fn: F) -> F:
    """Give the command ``fn(model, opts: TuneOptions, ...)`` every :class:`TuneOptions`
    field as an option of its own (after its leading arguments); the command receives them
    validated as one ``opts``."""
    hints = get_type_hints(fn, include_extras=True)
    option_hints = get_type_hints(TuneOptions, include_extras=True)
    own = [
        p.replace(annotation=hints[p.name], kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "opts"
    ]
    lead = [p for p in own if p.default is inspect.Parameter.empty]
    shared = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=f.default,
            annotation=option_hints[f.name],
        )
        for f in dataclasses.fields(TuneOptions)
    ]
    params = [*lead, *shared, *[p for p in own if p not in lead]]
    names = {f.name for f in dataclasses.fields(TuneOptions)}

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        opts = TuneOptions(**{k: kwargs.pop(k) for k in names})
        return fn(opts=opts, **kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    del command.__wrapped__  # typer reads the signature above, not fn's
    return command  # type: ignore[return-value]
