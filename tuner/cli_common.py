"""Pieces shared by the ``tunefarm`` command modules: consoles, options, error handling."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from database import DatabaseError, Storage, default_url
from tuner.errors import TuneFarmError

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
    typer.Option("--db", help="SQLAlchemy URL [default: $TUNEFARM_DB or sqlite:///tunefarm.db]."),
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
    return Storage(url or default_url(), create=create)


# Options of a tune job, shared by `tune` and `submit` (which forwards them to `tune`).
TrialsOpt = Annotated[int, typer.Option(help="Trial budget for the whole model.")]
JobOpt = Annotated[str | None, typer.Option(help="Job name (default: model and time).")]
SeedOpt = Annotated[int | None, typer.Option(help="Random seed of the search.")]
PerIterOpt = Annotated[int, typer.Option(help="Candidates measured per search round.")]
MinRepeatOpt = Annotated[int, typer.Option(help="Minimum time of one timed repeat.")]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option("--shape", help="Buckets of a symbolic dim: VAR=V1,V2,... (repeatable)."),
]
TransferOpt = Annotated[
    bool,
    typer.Option(
        "--transfer",
        help="Seed each bucket's search with the best schedules of the kernel's other buckets "
        "(tile sizes refitted).",
    ),
]
CostModelOpt = Annotated[
    str, typer.Option("--cost-model", help="Cost model: tunefarm, xgb (stock) or random.")
]
