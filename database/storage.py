"""Engine creation, connection setup and transactions with retry for the schedule database."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from database.errors import DatabaseError, error_summary

DEFAULT_URL = "sqlite:///tunefarm.db"
ENV_VAR = "TUNEFARM_DB"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")
T = TypeVar("T")


def default_url() -> str:
    """The database URL used when none is given: ``$TUNEFARM_DB`` or a SQLite file here."""
    return os.environ.get(ENV_VAR) or DEFAULT_URL


def _origin(from_env: bool) -> str:
    """Where a URL came from, for errors: nothing for an argument, the variable for
    ``$TUNEFARM_DB``."""
    return f" (the URL comes from ${ENV_VAR})" if from_env else ""


def _give_url(from_env: bool) -> str:
    """How to give another URL, for errors."""
    if from_env:
        return f"set {ENV_VAR} to such a URL, or unset it to use {DEFAULT_URL}"
    return "give --db such a URL"


def redact(url: str | URL) -> str:
    """The URL with its password hidden, for logs, errors and CLI output."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def parse_url(url: str, *, from_env: bool = False) -> URL:
    """Parse and validate a SQLAlchemy URL; one-line error for anything we cannot serve, with
    its cause and its fix (``from_env``: the URL came from ``$TUNEFARM_DB``)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseError(
            f"not a database URL: {url!r}{_origin(from_env)}: expected e.g. "
            f"sqlite:///tunefarm.db or postgresql://user@host/db; {_give_url(from_env)}"
        ) from None
    dialect = parsed.get_backend_name()
    if dialect not in SUPPORTED_DIALECTS:
        raise DatabaseError(
            f"unsupported database scheme {parsed.drivername!r} in {redact(parsed)}"
            f"{_origin(from_env)}: valid: {', '.join(SUPPORTED_DIALECTS)}; "
            f"{_give_url(from_env)}"
        )
    if dialect == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_file_is_read_only(path: str) -> bool:
    """A SQLite file nobody may write (mode bits, so it holds for root too): a schedule pack."""
    try:
        return not os.stat(path).st_mode & 0o222
    except OSError:
        return False


def _sqlite_setup(engine: Engine, *, read_only: bool) -> None:
    """Connection setup in a connect event; transactions begun by us, not by pysqlite.

    pysqlite begins a transaction lazily at the first write, so a read-then-write transaction
    would read outside it. Emitting BEGIN ourselves makes reads part of the transaction;
    write transactions use BEGIN IMMEDIATE so concurrent writers queue on the busy timeout
    instead of failing on a stale snapshot.
    """

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_conn: Any, _record: object) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        if not read_only:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("tunefarm_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write and not read_only else "BEGIN")


def make_engine(
    url: str, *, must_exist: bool = False, from_env: bool = False
) -> tuple[Engine, bool]:
    """An engine for ``url`` with TuneFarm's connection setup, and whether it is read-only."""
    parsed = parse_url(url, from_env=from_env)
    kwargs: dict[str, Any] = {"future": True}
    read_only = False
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            folder = os.path.dirname(os.path.abspath(database))
            if not os.path.isdir(folder):
                absolute = f"sqlite:///{os.path.abspath('/' + database)}"
                hint = (
                    f"; {redact(parsed)} names a path relative to the working directory: an "
                    f"absolute path takes four slashes ({absolute})"
                    if not os.path.isabs(database)
                    else ""
                )
                raise DatabaseError(
                    f"folder of the SQLite database does not exist: {folder}"
                    f"{_origin(from_env)}{hint}"
                )
            if must_exist and not os.path.exists(database):
                raise DatabaseError(
                    f"database file does not exist: {database}{_origin(from_env)}: check the "
                    f"path, or create a database with `tunefarm db upgrade --db {redact(parsed)}`"
                )
            read_only = sqlite_file_is_read_only(database)
        if read_only:
            uri = f"file:{os.path.abspath(database)}?mode=ro"
            kwargs["creator"] = lambda: sqlite3.connect(uri, uri=True, timeout=30)
        else:
            kwargs["connect_args"] = {"timeout": 30}
    else:
        # no pre-ping round trip per checkout: a dropped connection raises an invalidated
        # DBAPIError, which ``Storage.run`` retries on a fresh connection
        kwargs["pool_recycle"] = 1800
        kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ArgumentError, ImportError) as err:
        raise DatabaseError(f"cannot use {redact(parsed)}: {err}") from None
    if parsed.get_backend_name() == "sqlite":
        _sqlite_setup(engine, read_only=read_only)
    return engine, read_only


def _is_transient(err: BaseException) -> bool:
    if isinstance(err, DBAPIError) and err.connection_invalidated:
        return True
    text = str(getattr(err, "orig", err)).lower()
    return any(
        key in text
        for key in (
            "database is locked",
            "deadlock detected",
            "could not serialize access",
            "server closed the connection",
            "connection reset",
        )
    )


class Storage:
    """An engine plus a session factory; ``run`` retries transient failures.

    ``create`` makes the schema in a new database (and stamps it with the newest migration);
    without it the database must exist. Either way an existing database must be at the
    newest schema revision, or opening it fails naming ``tunefarm db upgrade``.
    """

    def __init__(
        self, url: str | None = None, *, create: bool = True, check_schema: bool = True
    ) -> None:
        from database import migrate

        self.from_env = url is None and bool(os.environ.get(ENV_VAR))
        self.url = url or default_url()
        self.created = False  # this opening created the schema
        self.engine, self.read_only = make_engine(
            self.url, must_exist=not create, from_env=self.from_env
        )
        self.dialect = self.engine.dialect.name
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.busy_sec = 0.0  # time spent in transactions, for the job's overhead figures
        self.calls = 0
        try:
            if create and not self.read_only and not migrate.has_tables(self.engine):
                migrate.create(self.engine)
                self.created = True
            elif not migrate.has_tables(self.engine):
                raise DatabaseError(
                    f"{redact(self.url)} is not a TuneFarm database (no tables)"
                    f"{_origin(self.from_env)}: `tunefarm db upgrade --db {redact(self.url)}` "
                    "creates the schema in an empty database"
                )
            elif check_schema:
                migrate.check_current(self.engine, redact(self.url))
        except DBAPIError as err:  # OperationalError, and sqlite3's DatabaseError on a non-db
            raise DatabaseError(self._describe(err, opening=True)) from None

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Session]:
        """One transaction: commit on success, roll back on error."""
        with self._sessions() as session, session.begin():
            if write:  # SQLite: BEGIN IMMEDIATE (see _sqlite_setup); reads begin plainly
                session.connection(execution_options={"tunefarm_write": True})
            yield session

    def run(self, fn: Callable[[Session], T], *, write: bool = True, attempts: int = 8) -> T:
        """Run ``fn`` in a transaction, retrying the whole of it on transient errors."""
        start = time.perf_counter()
        try:
            for attempt in range(attempts):
                try:
                    with self.transaction(write=write) as session:
                        return fn(session)
                except (OperationalError, DBAPIError) as err:
                    if not _is_transient(err) or attempt == attempts - 1:
                        raise DatabaseError(self._describe(err)) from None
                    time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            raise AssertionError("unreachable")
        finally:
            self.busy_sec += time.perf_counter() - start
            self.calls += 1

    def dispose(self) -> None:
        """Close all pooled connections."""
        self.engine.dispose()

    def _describe(self, err: BaseException, *, opening: bool = False) -> str:
        """One line for a driver error: its cause, where the URL came from, and the fix."""
        where = redact(self.url)
        origin = _origin(self.from_env)
        text = error_summary(getattr(err, "orig", None) or err, with_type=False)
        low = text.lower()
        if "file is not a database" in low:
            path = make_url(where).database if self.dialect == "sqlite" else where
            return (
                f"{path} is not an SQLite database{origin}: give the URL of a TuneFarm "
                "database (e.g. sqlite:///tunefarm.db)"
            )
        if "readonly database" in low or "read-only" in low or "permission denied" in low:
            return f"{where} is read-only ({text}){origin}: {self._write_fix()}"
        return f"{'cannot open' if opening else 'database error on'} {where}{origin}: {text}"

    def _write_fix(self) -> str:
        """How to get a database this process may write to."""
        if self.dialect != "sqlite":
            return "connect as a role that may write to TuneFarm's tables, or give another database"
        path = make_url(self.url).database or ""
        if self.read_only:  # no write bits: a schedule pack, meant to be read
            return (
                f"its file has no write permission (a schedule pack?); write to a copy "
                f"(cp {path} mine.db && chmod u+w mine.db, then --db sqlite:///mine.db) "
                f"or allow writing with chmod u+w {path}"
            )
        return (
            f"give this user write permission on {path} and its folder (the journal is "
            "written beside it), or use a copy"
        )
