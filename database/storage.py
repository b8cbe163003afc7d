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
SUPPORTED_DIALECTS = ("sqlite", "postgresql")
T = TypeVar("T")


def default_url() -> str:
    """The database URL used when none is given: ``$TUNEFARM_DB`` or a SQLite file here."""
    return os.environ.get("TUNEFARM_DB") or DEFAULT_URL


def redact(url: str | URL) -> str:
    """The URL with its password hidden, for logs, errors and CLI output."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def parse_url(url: str) -> URL:
    """Parse and validate a SQLAlchemy URL; one-line error for anything we cannot serve."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseError(
            f"not a database URL: {url!r} (expected e.g. sqlite:///tunefarm.db or "
            "postgresql://user@host/db)"
        ) from None
    dialect = parsed.get_backend_name()
    if dialect not in SUPPORTED_DIALECTS:
        raise DatabaseError(
            f"unsupported database scheme {parsed.drivername!r} in {redact(parsed)}; "
            f"valid: {', '.join(SUPPORTED_DIALECTS)}"
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


def make_engine(url: str, *, must_exist: bool = False) -> tuple[Engine, bool]:
    """An engine for ``url`` with TuneFarm's connection setup, and whether it is read-only."""
    parsed = parse_url(url)
    kwargs: dict[str, Any] = {"future": True}
    read_only = False
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            folder = os.path.dirname(os.path.abspath(database))
            if not os.path.isdir(folder):
                raise DatabaseError(f"folder of the SQLite database does not exist: {folder}")
            if must_exist and not os.path.exists(database):
                raise DatabaseError(f"database file does not exist: {database}")
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

        self.url = url or default_url()
        self.engine, self.read_only = make_engine(self.url, must_exist=not create)
        self.dialect = self.engine.dialect.name
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.busy_sec = 0.0  # time spent in transactions, for the job's overhead figures
        self.calls = 0
        try:
            if create and not self.read_only and not migrate.has_tables(self.engine):
                migrate.create(self.engine)
            elif not migrate.has_tables(self.engine):
                raise DatabaseError(f"{redact(self.url)} is not a TuneFarm database (no tables)")
            elif check_schema:
                migrate.check_current(self.engine, redact(self.url))
        except DBAPIError as err:  # OperationalError, and sqlite3's DatabaseError on a non-db
            raise DatabaseError(_describe(err, redact(self.url), opening=True)) from None

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
                        raise DatabaseError(_describe(err, redact(self.url))) from None
                    time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            raise AssertionError("unreachable")
        finally:
            self.busy_sec += time.perf_counter() - start
            self.calls += 1

    def dispose(self) -> None:
        """Close all pooled connections."""
        self.engine.dispose()


def _describe(err: BaseException, where: str, *, opening: bool = False) -> str:
    text = error_summary(getattr(err, "orig", None) or err, with_type=False)
    low = text.lower()
    if "file is not a database" in low:
        path = make_url(where).database if where.startswith("sqlite") else where
        return (
            f"{path} is not an SQLite database: give the URL of a TuneFarm database "
            "(e.g. sqlite:///tunefarm.db)"
        )
    if "readonly database" in low or "read-only" in low or "permission denied" in low:
        return f"{where} is read-only: {text}"
    return f"{'cannot open' if opening else 'database error on'} {where}: {text}"
