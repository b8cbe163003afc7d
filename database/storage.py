"""Engine creation, connection setup and transactions with retry for the schedule database."""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event, inspect, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from database.errors import DatabaseError
from database.models import SCHEMA_VERSION, Base, MetaRow

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


def _sqlite_on_connect(dbapi_conn: object, _record: object) -> None:
    cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str, *, must_exist: bool = False) -> Engine:
    """Create an engine for ``url`` with TuneFarm's connection setup."""
    parsed = parse_url(url)
    kwargs: dict[str, object] = {"future": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            folder = os.path.dirname(os.path.abspath(database))
            if not os.path.isdir(folder):
                raise DatabaseError(f"folder of the SQLite database does not exist: {folder}")
            if must_exist and not os.path.exists(database):
                raise DatabaseError(f"database file does not exist: {database}")
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ArgumentError, ImportError) as err:
        raise DatabaseError(f"cannot use {redact(parsed)}: {err}") from None
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
    return engine


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
    """An engine plus a session factory; ``transaction`` retries transient failures."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.url = url or default_url()
        self.engine = make_engine(self.url, must_exist=not create)
        self.dialect = self.engine.dialect.name
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            if create:
                self._create_schema()
            else:
                self._check_reachable()
        except OperationalError as err:
            raise DatabaseError(
                f"cannot open {redact(self.url)}: {_first_line(err.orig or err)}"
            ) from None

    def _check_reachable(self) -> None:
        if "tuning_records" not in inspect(self.engine).get_table_names():
            raise DatabaseError(f"{redact(self.url)} is not a TuneFarm database (no tables)")

    def _create_schema(self) -> None:
        tables = set(inspect(self.engine).get_table_names())
        if "tuning_records" not in tables:
            Base.metadata.create_all(self.engine)
            with self.transaction() as session:
                session.merge(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
            return
        with self.transaction() as session:
            version = session.scalar(select(MetaRow.value).where(MetaRow.key == "schema_version"))
        if version is None or int(version) != SCHEMA_VERSION:
            raise DatabaseError(
                f"{redact(self.url)} has schema version {version}, this TuneFarm needs "
                f"{SCHEMA_VERSION}"
            )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """One transaction: commit on success, roll back on error."""
        with self._sessions() as session, session.begin():
            yield session

    def run(self, fn: Callable[[Session], T], *, attempts: int = 8) -> T:
        """Run ``fn`` in a transaction, retrying the whole of it on transient errors."""
        for attempt in range(attempts):
            try:
                with self.transaction() as session:
                    return fn(session)
            except (OperationalError, DBAPIError) as err:
                if not _is_transient(err) or attempt == attempts - 1:
                    raise DatabaseError(
                        f"database error on {redact(self.url)}: {_first_line(err.orig or err)}"
                    ) from None
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def dispose(self) -> None:
        """Close all pooled connections."""
        self.engine.dispose()


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
