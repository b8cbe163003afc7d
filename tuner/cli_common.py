"""Pieces shared by the ``tunefarm`` command modules: consoles, options, error handling."""

from __future__ import annotations

import functools
import math
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click_errors  # typer 0.29 vendors click as _click
from typer.core import TyperGroup

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


def check_tune_options(trials: int, per_iter: int, min_repeat_ms: int) -> None:
    """Range checks of the tune options, naming the option."""
    if trials < 1:
        raise TuneFarmError(f"--trials must be at least 1 (got {trials})")
    if per_iter < 1:
        raise TuneFarmError(f"--per-iter must be at least 1 (got {per_iter})")
    if min_repeat_ms < 0:
        raise TuneFarmError(f"--min-repeat-ms must be 0 or more milliseconds (got {min_repeat_ms})")


def check_range(flag: str, value: float | None, low: float, high: float) -> None:
    """``value`` is None or a finite number in [low, high]."""
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise TuneFarmError(f"{flag} must be between {low:g} and {high:g} (got {value})")


# ----------------------------------------------------------------- cluster addresses
GCS_PORT = 6379  # Ray's defaults on the head node
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
ADDRESS_FORMS = (
    "HOST, HOST:PORT (the GCS, port 6379), ray://HOST:10001 or http://HOST:8265 (the dashboard)"
)


@dataclass(frozen=True)
class ClusterAddress:
    """A Ray cluster's head as given to ``--address``: ``scheme`` is None for a bare
    ``HOST[:PORT]`` (a GCS address, as ``ray start``/``ray status`` print), ``ray`` (Ray
    Client), ``http``/``https`` (the dashboard) or ``auto`` (the cluster this machine joined)."""

    scheme: str | None
    host: str
    port: int | None

    @property
    def gcs(self) -> str:
        """What ``ray.init`` takes: ``HOST:PORT`` (GCS port 6379 by default) or ``ray://``."""
        if self.scheme == "ray":
            return f"ray://{self.host}:{self.port or CLIENT_PORT}"
        bare = self.scheme is None and self.port not in (None, DASHBOARD_PORT)
        port = self.port if bare else GCS_PORT
        return f"{self.host}:{port}"

    @property
    def dashboard(self) -> str:
        """The dashboard's URL (port 8265 unless an http(s) URL names another)."""
        if self.scheme in ("http", "https"):
            port = f":{self.port}" if self.port else ""
            return f"{self.scheme}://{self.host}{port}"
        return f"http://{self.host}:{DASHBOARD_PORT}"


def parse_address(text: str) -> ClusterAddress:
    """Parse ``--address`` (see :data:`ADDRESS_FORMS`); ``auto`` is resolved from the cluster
    this machine joined with ``ray start``."""
    text = text.strip().rstrip("/")
    if text == "auto":
        return _auto_address()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if scheme not in ("", "ray", "http", "https"):
        raise TuneFarmError(
            f"unsupported address {text!r}: give the Ray cluster's head as {ADDRESS_FORMS}"
        )
    host, colon, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    if colon and not (port.isdigit() and 0 < int(port) < 65536):
        raise TuneFarmError(f"bad port in address {text!r}: expected {ADDRESS_FORMS}")
    host = host.strip("[]")
    if not host or "/" in host or " " in host:
        raise TuneFarmError(f"bad host in address {text!r}: expected {ADDRESS_FORMS}")
    return ClusterAddress(scheme or None, host, int(port) if colon else None)


def _auto_address() -> ClusterAddress:
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except Exception:
        found = None
    if not found:
        raise TuneFarmError(
            "--address auto: this machine has not joined a Ray cluster (`ray start`); "
            f"give the head's address instead: {ADDRESS_FORMS}"
        )
    return parse_address(found)


def check_reachable(host: str, port: int, what: str, timeout: float = 5.0) -> None:
    """Fail in one line when nothing accepts a TCP connection at ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise TuneFarmError(
            f"cannot reach the Ray cluster's {what} at {host}:{port}: {reason}"
        ) from None


def ray_address(address: str | None) -> str | None:
    """``--address`` of ``tune``/``bench`` as ``ray.init`` takes it, checked to answer before
    any work; None (start a local Ray instance) without one or for ``local``."""
    if address is None or address.strip() == "local":
        return None
    addr = parse_address(address)
    if addr.scheme == "ray":
        check_reachable(addr.host, addr.port or CLIENT_PORT, "Ray Client server")
    else:
        check_reachable(addr.host, int(addr.gcs.rpartition(":")[2]), "GCS")
    return addr.gcs


# Options of a tune job, shared by `tune` and `submit` (which forwards them to `tune`).
TrialsOpt = Annotated[int, typer.Option(help="Trial budget for the whole model.")]
JobOpt = Annotated[str | None, typer.Option(help="Job name (default: model and time).")]
SeedOpt = Annotated[int | None, typer.Option(help="Random seed of the search.")]
PerIterOpt = Annotated[int, typer.Option(help="Candidates measured per search round.")]
MinRepeatOpt = Annotated[
    int, typer.Option("--min-repeat-ms", help="Minimum time of one timed repeat, in ms.")
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
CostModelOpt = Annotated[
    str, typer.Option("--cost-model", help="Cost model: tunefarm, xgb (stock) or random.")
]
