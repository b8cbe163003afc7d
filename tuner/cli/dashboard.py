"""``tunefarm dashboard``: serve a read-only web view of the schedule database."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from typing import Annotated

import typer

from database.errors import DatabaseError
from database.storage import default_url
from tuner.cli.cluster import AddressOpt
from tuner.cli.common import DbOpt, err_console, user_errors
from tuner.errors import TuneFarmError

HostOpt = Annotated[
    str,
    typer.Option("--host", help="Address to listen on; one other than loopback needs the token."),
]
PortOpt = Annotated[int, typer.Option("--port", help="Port to listen on.")]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="TUNEFARM_DASHBOARD_TOKEN",
        help="Access token every request must carry (?token=, then a cookie). Off loopback "
        "without one, a token is generated and printed.",
        show_default=False,
    ),
]

CompareDbOpt = Annotated[
    str | None,
    typer.Option(
        "--compare-db",
        help="A second database (SQLAlchemy URL, read-only too) whose jobs /compare-db sets "
        "beside this one's.",
        show_default=False,
    ),
]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """A port the server can bind, checked before serving (one clear line if not)."""
    if not 0 < port < 65536:
        raise TuneFarmError(f"--port must be between 1 and 65535 (got {port})")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as err:
            raise TuneFarmError(f"cannot listen on {host}:{port}: {err.strerror}") from None


def dashboard(
    db: DbOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    token: TokenOpt = None,
    address: AddressOpt = None,
    compare_db: CompareDbOpt = None,
) -> None:
    """Serve a read-only web view of the database: jobs (live), curves, coverage, devices."""
    import uvicorn

    from tuner.dashboard.app import DashboardConfig, create_app
    from tuner.dashboard.db import open_read_only

    if token is not None and len(token) < 8:
        raise TuneFarmError("--token must have at least 8 characters")
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(18)
    check_port(host, port)
    database = open_read_only(db or default_url())
    other = None
    if compare_db is not None:
        try:
            other = open_read_only(compare_db)
        except DatabaseError as err:  # the line names which of the two databases it is
            database.dispose()
            raise DatabaseError(f"--compare-db: {err}") from None
    app = create_app(DashboardConfig(db=database, token=token, address=address, compare=other))
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    beside = f"; {other.where} read-only beside it at /compare-db" if other else ""
    err_console.print(
        f"serving {database.where} read-only at {url} (Ctrl-C stops){beside}",
        highlight=False,
        soft_wrap=True,
    )
    try:
        uvicorn.run(app, host=host.strip("[]"), port=port, log_level="warning", access_log=False)
    finally:
        database.dispose()
        if other is not None:
            other.dispose()


def register(app: typer.Typer) -> None:
    """Add ``dashboard`` to the ``tunefarm`` app."""
    app.command(name="dashboard")(user_errors(dashboard))
