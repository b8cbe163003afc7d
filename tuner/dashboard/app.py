"""The dashboard's web app: HTML pages and their ``/api/...`` JSON twins over a read-only
database, the chart script and styles served from the package, and a token check.

Every page's data comes from :mod:`tuner.dashboard.queries`; templates autoescape everything
they print and the Content-Security-Policy allows scripts from this server only, so a name
from the database can never run as code in the browser.
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, FileSystemLoader
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from database.errors import error_summary
from tuner.dashboard import queries
from tuner.dashboard.db import ReadOnlyDatabase

HERE = Path(__file__).parent
TOKEN_COOKIE = "tunefarm_token"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
POLL_MS = 2000  # how often the pages of running jobs ask for fresh data


@dataclass(frozen=True)
class DashboardConfig:
    """What the app serves: the database, an optional access token, the Ray cluster."""

    db: ReadOnlyDatabase
    token: str | None = None
    address: str | None = None  # a Ray cluster whose live workers the devices page lists
    compare: ReadOnlyDatabase | None = None  # a second database whose jobs /compare-db shows
    jobs_limit: int = 100

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 8:
            raise ValueError("the dashboard token must have at least 8 characters")
        if self.jobs_limit < 1:
            raise ValueError(f"jobs_limit must be at least 1 (got {self.jobs_limit})")


# --------------------------------------------------------------------------- formatting
def fmt_sec(sec: float | None) -> str:
    """A kernel's time to three significant digits: ``812 ns``, ``3.49 µs``, ``1.204 ms``."""
    if sec is None:
        return "-"
    if sec < 1e-6:
        return f"{sec * 1e9:.3g} ns"
    return f"{sec * 1e6:.3g} µs" if sec < 1e-3 else f"{sec * 1e3:.4g} ms"


def fmt_x(value: float | None) -> str:
    """A speedup or ratio: ``3.21x``."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def fmt_dur(sec: float | None) -> str:
    """A wall time: ``42 s``, ``3 min 05 s``, ``2 h 01 min``."""
    if sec is None:
        return "-"
    sec = round(sec)
    if sec < 60:
        return f"{sec} s"
    if sec < 3600:
        return f"{sec // 60} min {sec % 60:02d} s"
    return f"{sec // 3600} h {sec % 3600 // 60:02d} min"


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters.update(sec=fmt_sec, x=fmt_x, dur=fmt_dur, num=fmt_num, q=lambda s: quote(s, ""))
    return env


# --------------------------------------------------------------------------- token check
class TokenGate:
    """ASGI middleware: with a token, every request must carry it (``?token=``, the cookie
    set by the first such request, or ``Authorization: Bearer``); else 401."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    def _given(self, scope: Scope) -> tuple[str | None, bool]:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if query.get("token"):
            return query["token"][0], True
        for name, value in scope.get("headers", []):
            if name == b"authorization" and value.lower().startswith(b"bearer "):
                return value[7:].decode("latin-1").strip(), False
            if name == b"cookie":
                cookie = SimpleCookie(value.decode("latin-1"))
                if TOKEN_COOKIE in cookie:
                    return cookie[TOKEN_COOKIE].value, False
        return None, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given, in_query = self._given(scope)
        if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            response = PlainTextResponse(
                "401: this dashboard needs its access token (open the URL it printed)", 401
            )
            await response(scope, receive, send)
            return
        if not in_query:
            await self.app(scope, receive, send)
            return

        async def with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
            await send(message)

        await self.app(scope, receive, with_cookie)


class SecurityHeaders:
    """ASGI middleware: the Content-Security-Policy and friends on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def add(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                headers.append((b"content-security-policy", CSP.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                headers.append((b"cache-control", b"no-store"))
            await send(message)

        await self.app(scope, receive, add)


# --------------------------------------------------------------------------- the app
Handler = Callable[[Request], Awaitable[Response]]


class DatabaseFailed(Exception):
    """A read failed on one of the dashboard's databases: one line naming it (password
    hidden)."""

    def __init__(self, where: str, err: DBAPIError) -> None:
        text = error_summary(getattr(err, "orig", None) or err, with_type=False)
        super().__init__(f"database error on {where}: {text}")


def create_app(config: DashboardConfig) -> Starlette:
    """The dashboard's ASGI app over ``config.db``."""
    env = _environment()
    db = config.db
    finished = queries.FinishedJobs()

    async def read(fn: Callable[[Connection], Any], on: ReadOnlyDatabase = db) -> Any:
        def run() -> Any:
            try:
                with on.engine.connect() as conn:
                    return fn(conn)
            except DBAPIError as err:
                raise DatabaseFailed(on.where, err) from None

        return await run_in_threadpool(run)

    def page(name: str, request: Request, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(
            where=db.where,
            path=request.url.path,
            poll_ms=POLL_MS,
            second=config.compare.where if config.compare else None,
            **context,
        )
        return HTMLResponse(html)

    def missing(request: Request, what: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": f"no {what}"}, status_code=404)
        return HTMLResponse(
            env.get_template("missing.html").render(where=db.where, path="", what=what), 404
        )

    def int_param(request: Request, name: str) -> int | None:
        value = request.query_params.get(name, "")
        return int(value) if value.isdigit() else None

    # each view returns its data (None: not found) and its template
    async def jobs_data(request: Request) -> Any:
        return await read(lambda c: queries.jobs(c, limit=config.jobs_limit, cache=finished))

    async def job_data(request: Request) -> Any:
        jid = request.path_params["job_id"]
        return await read(lambda c: queries.job(c, jid))

    async def curves_data(request: Request) -> Any:
        jid = request.path_params["job_id"]
        return await read(lambda c: queries.curves(c, jid))

    async def models_data(request: Request) -> Any:
        return await read(queries.models)

    async def coverage_data(request: Request) -> Any:
        name, target = request.path_params["model"], request.query_params.get("target")
        return await read(lambda c: queries.coverage(c, name, target))

    async def workload_data(request: Request) -> Any:
        wid, target = request.path_params["wid"], request.query_params.get("target")
        return await read(lambda c: queries.workload(c, wid, target))

    async def devices_data(request: Request) -> Any:
        data: dict[str, Any] = {"devices": await read(queries.devices), "workers": None}
        if config.address is not None:
            data["workers"], data["workers_error"] = await run_in_threadpool(
                _live_workers, config.address
            )
        return data

    async def compare_data(request: Request) -> Any:
        a, b = int_param(request, "a"), int_param(request, "b")
        if a is None or b is None:  # the form: pick two jobs (A preselected if given)
            jobs = await read(lambda c: queries.jobs(c, limit=config.jobs_limit, cache=finished))
            ids = [j["id"] for j in jobs]
            if a not in ids:  # the second newest against the newest
                a = ids[min(1, len(ids) - 1)] if ids else None
            b = next((i for i in ids if i != a), a)
            return {"jobs": jobs, "pick": {"a": a, "b": b}}
        return await read(lambda c: queries.compare(c, a, b))

    async def compare_db_data(request: Request) -> Any:
        other = config.compare
        if other is None:
            return {"error": "no second database: start the dashboard with --compare-db URL"}
        a, b = int_param(request, "a"), int_param(request, "b")
        if a is None or b is None:  # the form: a job of each database
            limit = config.jobs_limit
            return {
                "jobs": await read(lambda c: queries.jobs(c, limit=limit, cache=finished)),
                "other_jobs": await read(lambda c: queries.jobs(c, limit=limit), other),
                "other_where": other.where,
                "pick": {"a": a, "b": None},
            }
        side_a = await read(lambda c: queries.compare_side(c, a))
        side_b = await read(lambda c: queries.compare_side(c, b), other)
        if side_a is None or side_b is None:
            return None
        return {**queries.compare_sides(side_a, side_b), "other_where": other.where}

    views: dict[str, tuple[Callable[[Request], Awaitable[Any]], str, str]] = {
        "/": (jobs_data, "jobs.html", "jobs"),
        "/jobs/{job_id:int}": (job_data, "job.html", "job"),
        "/jobs/{job_id:int}/curves": (curves_data, "", "job"),
        "/models": (models_data, "models.html", "models"),
        "/models/{model:path}": (coverage_data, "coverage.html", "model"),
        "/workloads/{wid:int}": (workload_data, "workload.html", "workload"),
        "/devices": (devices_data, "devices.html", "devices"),
        "/compare": (compare_data, "compare.html", "jobs to compare"),
        "/compare-db": (compare_db_data, "compare.html", "jobs to compare"),
    }

    def html_view(fetch: Callable[[Request], Awaitable[Any]], template: str, what: str) -> Handler:
        async def view(request: Request) -> Response:
            data = await fetch(request)
            if data is None:
                return missing(request, what)
            return page(template, request, data=data, params=request.path_params)

        return view

    def api_view(fetch: Callable[[Request], Awaitable[Any]], what: str) -> Handler:
        async def view(request: Request) -> Response:
            start = time.perf_counter()
            data = await fetch(request)
            if data is None:
                return missing(request, what)
            ms = (time.perf_counter() - start) * 1e3
            return JSONResponse(data, headers={"server-timing": f"db;dur={ms:.1f}"})

        return view

    routes: list[Route | Mount] = []
    for path, (fetch, template, what) in views.items():
        api = "/api/jobs" if path == "/" else f"/api{path}"
        routes.append(Route(api, api_view(fetch, what)))
        if template:
            routes.append(Route(path, html_view(fetch, template, what)))
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))

    async def db_failed(request: Request, exc: Exception) -> Response:
        line = str(exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": line}, status_code=503)
        return PlainTextResponse(line, status_code=503)

    app = Starlette(routes=routes, exception_handlers={DatabaseFailed: db_failed})
    app.add_middleware(SecurityHeaders)
    app.add_middleware(TokenGate, token=config.token)
    return app


def _live_workers(address: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The Ray cluster's workers, or why they cannot be listed."""
    from tuner.cluster.client import cluster_workers

    try:
        return cluster_workers(address), None
    except Exception as err:
        return None, error_summary(err)
