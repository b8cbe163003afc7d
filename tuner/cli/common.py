"""Pieces shared by the ``tunefarm`` command modules: consoles, options, error handling."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click_errors  # typer 0.29 vendors click as _click
from typer.core import TyperGroup

from database import DatabaseError, Storage
from tuner.cluster.address import ADDRESS_FORMS
from tuner.errors import JobInterrupted, TuneFarmError

# Wide enough for the tables when output goes to a file or a pipe (rich's default is 80).
console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
F = TypeVar("F", bound=Callable[..., Any])

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


# ----------------------------------------------------------------- checks before any work
def check_model_file(path: Path) -> None:
    """Before any work: the model path is one ``load_model`` can read."""
    from tuner.model import check_model_path

    check_model_path(path)


def check_output_file(path: Path, flag: str) -> None:
    """An output file the command can write (``flag`` names the option in the error)."""
    if path.is_dir():
        raise TuneFarmError(f"{flag} {path} is a directory: give a file path")
    folder = path.parent
    if not folder.is_dir():
        raise TuneFarmError(f"{flag} {path}: folder does not exist: {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise TuneFarmError(f"{flag} {path}: not writable")


def check_tune_options(
    trials: int, per_iter: int, min_repeat_ms: int, siblings: int = 0, screen: float = 2.0
) -> None:
    """Range checks of the tune options, naming the option."""
    if trials < 1:
        raise TuneFarmError(f"--trials must be at least 1 (got {trials})")
    if per_iter < 1:
        raise TuneFarmError(f"--per-iter must be at least 1 (got {per_iter})")
    if min_repeat_ms < 0:
        raise TuneFarmError(f"--min-repeat-ms must be 0 or more milliseconds (got {min_repeat_ms})")
    if siblings < 0:
        raise TuneFarmError(f"--siblings must be 0 or more (got {siblings})")
    if not (screen == 0 or 1 <= screen < math.inf):
        raise TuneFarmError(f"--screen must be 0 (off) or at least 1 (got {screen:g})")


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(flag: str, text: str | None) -> float | None:
    """Seconds from ``90``, ``90s``, ``2.5m``, ``1h`` or ``1h30m`` (None stays None)."""
    if text is None:
        return None
    number = r"\s*(\d+(?:\.\d+)?)\s*"
    low = text.lower()
    if re.fullmatch(number, low):
        total = float(low)
    elif re.fullmatch(f"(?:{number}[smh])+\\s*", low):
        total = sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(f"{number}([smh])", low))
    else:
        total = 0.0
    if not 0 < total < math.inf:
        raise TuneFarmError(
            f"{flag} must be a positive duration like 90s, 10m or 1h30m (got {text!r})"
        )
    return total


def check_range(flag: str, value: float | None, low: float, high: float) -> None:
    """``value`` is None or a finite number in [low, high]."""
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise TuneFarmError(f"{flag} must be between {low:g} and {high:g} (got {value})")


# Options of a tune job, shared by `tune` and `submit` (which forwards them to `tune`).
TrialsOpt = Annotated[int, typer.Option(help="Trial budget for the whole model.")]
JobOpt = Annotated[str | None, typer.Option(help="Job name (default: model and time).")]
SeedOpt = Annotated[int | None, typer.Option(help="Random seed of the search.")]
PerIterOpt = Annotated[int, typer.Option(help="Candidates measured per search round.")]
MinRepeatOpt = Annotated[
    int, typer.Option("--min-repeat-ms", help="Minimum time of one timed repeat, in ms.")
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
CostModelOpt = Annotated[
    str, typer.Option("--cost-model", help="Cost model: tunefarm, xgb (stock) or random.")
]
