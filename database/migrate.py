"""Schema versions: Alembic migrations shipped in ``database/migrations``.

A new database is created from the models and stamped with the newest revision (as Optuna's
RDB storage does); an older one is brought forward by ``tunefarm db upgrade``. Databases made
before migrations existed (schema 1) carry only ``tunefarm_meta.schema_version = 1`` and are
treated as revision ``0001``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, select

from database.errors import DatabaseError
from database.models import Base, MetaRow

MIGRATIONS = Path(__file__).with_name("migrations")


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this TuneFarm knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def has_tables(engine: Engine) -> bool:
    """Whether the database holds TuneFarm's tables."""
    return "tuning_records" in inspect(engine).get_table_names()


def create(engine: Engine) -> None:
    """Create every table in an empty database and stamp it with the newest revision."""
    with engine.begin() as conn:
        conn = conn.execution_options(tunefarm_write=True)
        Base.metadata.create_all(conn)
        # the Alembic revision is the version; the meta row (revision "000N" is N) stays for
        # readers older than the migrations, as each revision keeps it current
        version = str(int(head_revision()))
        conn.execute(MetaRow.__table__.insert().values(key="schema_version", value=version))
        command.stamp(_config(conn), "head")


def current_revision(conn: Connection) -> str | None:
    """The database's revision; ``0001`` for a pre-migration schema-1 database."""
    revision = MigrationContext.configure(conn).get_current_revision()
    if revision is not None:
        return revision
    version = conn.execute(
        select(MetaRow.value).where(MetaRow.key == "schema_version")
    ).scalar_one_or_none()
    return f"{int(version):04d}" if version is not None and version.isdigit() else None


def check_current(engine: Engine, where: str) -> None:
    """Refuse a database whose schema is not the newest, naming the command that fixes it."""
    with engine.connect() as conn:
        revision = current_revision(conn)
    head = head_revision()
    if revision == head:
        return
    known = {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}
    if revision in known:
        raise DatabaseError(
            f"{where} has schema revision {revision}, this TuneFarm needs {head}: "
            f"run `tunefarm db upgrade --db {where}`"
        )
    raise DatabaseError(
        f"{where} has schema revision {revision!r}, which this TuneFarm (newest {head}) does "
        "not know: upgrade TuneFarm"
    )


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the database to the newest revision; returns (from, to)."""
    with engine.begin() as conn:
        conn = conn.execution_options(tunefarm_write=True)
        before = current_revision(conn)
        cfg = _config(conn)
        if MigrationContext.configure(conn).get_current_revision() is None and before:
            command.stamp(cfg, before)  # a pre-migration database: say where it stands
        command.upgrade(cfg, "head")
        after = current_revision(conn)
    assert after is not None
    return before, after
