"""Schema revisions: a schema-1 file is refused, then upgraded in place with its records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from typer.testing import CliRunner

from database import DatabaseError, Storage, migrate
from database.models import Base
from database.queries import stats
from tests.conftest import DATA
from tuner.cli import app


def _no_drift(storage: Storage) -> None:
    with storage.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    # tables the models know that a migration forgot, or columns/indexes that differ
    assert diff == [], diff


def test_new_database_is_stamped_with_the_newest_revision(any_url: str) -> None:
    storage = Storage(any_url)
    with storage.engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
    Storage(any_url, create=False)  # reopens without complaint


def test_schema_1_file_is_refused_then_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(DATA / "schema_v1.db", path)  # written by TuneFarm 0.1 (schema 1) in a real tune
    url = f"sqlite:///{path}"
    with pytest.raises(DatabaseError, match=r"revision 0001.*run `tunefarm db upgrade --db"):
        Storage(url)
    result = CliRunner().invoke(app, ["db", "stats", "--db", url])
    assert result.exit_code == 1 and "tunefarm db upgrade" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert result.exit_code == 0, result.output
    assert f"from revision 0001 to {migrate.head_revision()}" in result.output
    assert migrate.head_revision() == "0009"
    storage = Storage(url, create=False)
    assert stats(storage)["valid_records"] == 4  # nothing lost
    _no_drift(storage)
    with storage.engine.connect() as conn:
        keys = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM tuning_records WHERE device_key IS NOT NULL"
        ).scalar()
    assert keys == 4  # the data migration filled the new column
    again = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert again.exit_code == 0 and "up to date" in again.output


def test_every_revision_upgrades_to_the_models(any_url: str) -> None:
    """Walk the migrations from an empty database (both backends): no drift from the models."""
    from alembic import command

    from database.storage import make_engine

    engine, _ = make_engine(any_url)  # an engine, without creating the schema
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0001")
    with pytest.raises(DatabaseError, match="tunefarm db upgrade"):
        migrate.check_current(engine, "db")
    assert migrate.upgrade(engine) == ("0001", migrate.head_revision())
    engine.dispose()
    storage = Storage(any_url, create=False)
    _no_drift(storage)


def test_revision_0003_upgrades_to_the_head_with_the_feature_cache(any_url: str) -> None:
    """A database at 0003 (cost-model snapshots, no feature cache) holding a record is
    refused, upgraded, keeps its record and caches features that cascade with it."""
    from alembic import command
    from sqlalchemy import text

    from database.storage import make_engine

    engine, _ = make_engine(any_url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0003")
        conn.exec_driver_sql(
            "INSERT INTO workloads (id, shash, mod_json, tvm_version, created_at) "
            "VALUES (1, 'h', '{}', 'x', CURRENT_TIMESTAMP)"
        )
        conn.exec_driver_sql(
            "INSERT INTO tuning_records (id, workload_id, candidate_hash, trace_json, "
            "args_info_json, target_key, target_json, target_kind, created_at) "
            "VALUES (7, 1, 'c', '[]', '[]', 'k', '{}', 'llvm', CURRENT_TIMESTAMP)"
        )
    assert "record_features" not in inspect(engine).get_table_names()
    with pytest.raises(DatabaseError, match=r"revision 0003.*needs 0009.*tunefarm db upgrade"):
        Storage(any_url, create=False)
    assert migrate.upgrade(engine) == ("0003", migrate.head_revision())
    engine.dispose()
    storage = Storage(any_url, create=False)
    _no_drift(storage)
    with storage.engine.begin() as conn:
        assert conn.execute(text("SELECT value FROM tunefarm_meta")).scalar() == "9"
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM generic_runs").scalar() == 0
        conn.execute(
            text("INSERT INTO record_features VALUES (7, 1, 2, :b, :b, 0, 0)"),
            {"b": b""},
        )
        conn.exec_driver_sql("DELETE FROM tuning_records WHERE id = 7")
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM record_features").scalar() == 0


def test_revision_0005_upgrades_to_every_commit_a_record(any_url: str) -> None:
    """A database at 0005 (one record per candidate) keeps its records, gets each valid
    record's median and stock's sort key, and stores a re-measured candidate as a record of
    its own; downgrading keeps the first record of each candidate."""
    from alembic import command
    from sqlalchemy import text

    from database.storage import make_engine

    engine, _ = make_engine(any_url)
    insert = (
        "INSERT INTO tuning_records (id, workload_id, candidate_hash, trace_json, "
        "args_info_json, run_secs_json, mean_sec, target_key, target_json, target_kind, "
        "created_at) VALUES (:id, 1, :c, :t, '[]', :secs, :mean, 'k', '{}', 'llvm', "
        "CURRENT_TIMESTAMP)"
    )
    rows = [
        {"id": 1, "c": "a", "t": '[[["Split"]], []]', "secs": "[1.0, 2.0, 6.0]", "mean": 3.0},
        {"id": 2, "c": "b", "t": "[[], []]", "secs": "[4.0]", "mean": 4.0},  # the default
        {"id": 3, "c": "c", "t": '[[["Split"]], []]', "secs": None, "mean": None},  # failed
    ]
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0005")
        conn.exec_driver_sql(
            "INSERT INTO workloads (id, shash, mod_json, tvm_version, created_at) "
            "VALUES (1, 'h', '{}', 'x', CURRENT_TIMESTAMP)"
        )
        for row in rows:
            conn.execute(text(insert), row)
    assert migrate.upgrade(engine) == ("0005", migrate.head_revision())
    with engine.begin() as conn:
        got = conn.exec_driver_sql(
            "SELECT id, median_sec, rank_sec FROM tuning_records ORDER BY id"
        ).all()
        assert [tuple(r) for r in got] == [(1, 2.0, 3.0), (2, 4.0, None), (3, None, None)]
        conn.execute(text(insert), {**rows[0], "id": 4, "secs": "[5.0]", "mean": 5.0})
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM tuning_records").scalar() == 4
    _no_drift(Storage(any_url, create=False))
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0005")
        ids = conn.exec_driver_sql("SELECT id FROM tuning_records ORDER BY id").scalars()
        assert list(ids) == [1, 2, 3]
    engine.dispose()
