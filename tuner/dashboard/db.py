"""The dashboard's connection: a schedule database opened read-only, checked once at start.

SQLite files are opened with ``mode=ro`` (SQLite itself refuses every write) and PostgreSQL
sessions with ``default_transaction_read_only`` (the server refuses every write), so no page
can change the database whatever its queries do. A database that is missing, not TuneFarm's or
at another schema revision raises :class:`~database.errors.DatabaseError` with one line.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError

from database.errors import DatabaseError, error_summary
from database.storage import parse_url, redact


@dataclass(frozen=True)
class ReadOnlyDatabase:
    """A read-only engine on a TuneFarm database, and its URL without the password."""

    engine: Engine
    where: str  # the URL with its password hidden: the only form pages and logs show

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_engine(path: str) -> Engine:
    if not path or path == ":memory:":
        raise DatabaseError("the dashboard needs a database file or server, not :memory:")
    if not os.path.isfile(path):
        raise DatabaseError(f"database file does not exist: {path}")
    uri = f"file:{os.path.abspath(path)}?mode=ro"
    engine = create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
    )

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_conn: Any, _record: object) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA query_only=1")
        cursor.close()

    return engine


def open_read_only(url: str) -> ReadOnlyDatabase:
    """Open ``url`` read-only and check it is a TuneFarm database at this schema revision."""
    from database import migrate

    parsed = parse_url(url)
    where = redact(parsed)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed.database or "")
    else:
        engine = create_engine(
            parsed,
            pool_recycle=1800,
            pool_pre_ping=True,
            connect_args={
                "connect_timeout": 10,
                "options": "-c default_transaction_read_only=on",
            },
        )
    try:
        if not migrate.has_tables(engine):
            raise DatabaseError(f"{where} is not a TuneFarm database (no tables)")
        migrate.check_current(engine, where)
    except DBAPIError as err:
        engine.dispose()
        text = error_summary(getattr(err, "orig", None) or err, with_type=False)
        if "file is not a database" in text.lower():
            raise DatabaseError(f"{where} is not an SQLite database") from None
        raise DatabaseError(f"cannot open {where}: {text}") from None
    except DatabaseError:
        engine.dispose()
        raise
    return ReadOnlyDatabase(engine, where)
