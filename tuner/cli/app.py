"""The ``tunefarm`` app: one typer app, one module per command group (``run`` for
tune/build/bench, ``db``, ``cost_model``, ``cluster``, ``plan``), shared options in ``common``."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from database.errors import error_summary
from tuner.cli import cluster, dashboard, generate, plan, run
from tuner.cli.common import CONTEXT_SETTINGS, CompactGroup
from tuner.cli.cost_model import cost_model_app
from tuner.cli.db import db_app

app = typer.Typer(
    name="tunefarm",
    help="Distributed autotuning of TVM tensor programs into a shared schedule database. "
    "Exit codes: 0 success; 1 an error, one `error: ...` line naming the cause; 2 a usage "
    "error (an unknown option, a value of the wrong type) or, for bench, outputs that disagree.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=CompactGroup,
    context_settings=CONTEXT_SETTINGS,
)
app.add_typer(db_app, name="db")
app.add_typer(cost_model_app, name="cost-model")
app.add_typer(cost_model_app, name="model", hidden=True)  # the old name, for scripts
run.register(app)  # tune, build, bench
cluster.register(app)  # submit, jobs, status, logs, workers
plan.register(app)  # plan, profile record
generate.register(app)  # generate (decoder LLMs)
dashboard.register(app)  # dashboard


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"tunefarm {version('tunefarm')}")
        except PackageNotFoundError:
            print("tunefarm (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The tunefarm command line (see the app's help)."""


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
        print(
            f"error: {error_summary(err)} (set TUNEFARM_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
