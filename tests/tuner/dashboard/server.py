"""A real dashboard server for the tests: uvicorn on a free loopback port, in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import uvicorn

from tuner.dashboard.app import DashboardConfig, create_app
from tuner.dashboard.db import open_read_only

XSS = "<img src=x onerror=alert(1)>"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(
    url: str,
    *,
    token: str | None = None,
    host: str = "127.0.0.1",
    compare: str | None = None,
    address: str | None = None,
) -> Iterator[str]:
    """Serve the dashboard of ``url`` (``compare``: a second database, ``address``: a Ray
    cluster); yields its base URL (``http://127.0.0.1:PORT``)."""
    db = open_read_only(url)
    other = open_read_only(compare) if compare is not None else None
    port = free_port()
    app = create_app(DashboardConfig(db=db, token=token, address=address, compare=other))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the dashboard server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        db.dispose()
        if other is not None:
            other.dispose()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), dict(err.headers)
