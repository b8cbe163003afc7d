"""What a newcomer meets at the database's door: an empty database made ready by `db upgrade`,
and errors that give the cause, the fix, and whether the URL came from ``$TUNEFARM_DB``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database import Storage, migrate
from tuner.cli import app

runner = CliRunner()


def _tunefarm(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, args, env={"TUNEFARM_DB": "", **(env or {})})
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split())


def test_db_upgrade_creates_the_schema_in_an_empty_database(any_url: str) -> None:
    """A new SQLite file or a PostgreSQL database without tables: `db upgrade` creates the
    schema and says so; the second time it is up to date."""
    code, out = _tunefarm(["db", "stats", "--db", any_url])
    assert code == 1 and f"tunefarm db upgrade --db {any_url}`" in out
    code, out = _tunefarm(["db", "upgrade", "--db", any_url])
    assert code == 0, out
    assert f"created the TuneFarm schema in {any_url} (revision {migrate.head_revision()})" in out
    code, out = _tunefarm(["db", "upgrade", "--db", any_url])
    assert code == 0 and "up to date" in out
    code, out = _tunefarm(["db", "stats", "--db", any_url, "--json"])
    assert code == 0 and json.loads(out)["records"] == 0


def test_db_upgrade_creates_the_schema_in_an_empty_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.touch()  # what `touch` or a provisioning script leaves
    code, out = _tunefarm(["db", "upgrade", "--db", f"sqlite:///{path}"])
    assert code == 0 and "created the TuneFarm schema" in out, out
    Storage(f"sqlite:///{path}", create=False)  # a TuneFarm database at the newest revision


def test_a_relative_sqlite_path_hints_at_four_slashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = _tunefarm(["db", "stats", "--db", "sqlite:///srv/tf/a.db"])
    assert code == 1
    assert f"folder of the SQLite database does not exist: {tmp_path}/srv/tf" in out
    assert "an absolute path takes four slashes (sqlite:////srv/tf/a.db)" in out
    assert "TUNEFARM_DB" not in out
    code, out = _tunefarm(["db", "stats"], env={"TUNEFARM_DB": "sqlite:///srv/tf/a.db"})
    assert code == 1 and "sqlite:////srv/tf/a.db" in out
    assert "the URL comes from $TUNEFARM_DB" in out


def test_a_read_only_database_says_why_and_how_to_write(tmp_path: Path) -> None:
    path = tmp_path / "pack.db"
    url = f"sqlite:///{path}"
    Storage(url).dispose()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    os.chmod(path, 0o444)
    src = tmp_path / "ms"
    src.mkdir()
    (src / "database_workload.json").write_text("")
    (src / "database_tuning_record.json").write_text("")
    code, out = _tunefarm(["db", "import", str(src), "--db", url])
    assert code == 1
    assert f"{url} is read-only" in out  # the cause
    assert f"chmod u+w {path}" in out and "write to a copy" in out  # the fix
    assert "TUNEFARM_DB" not in out
    code, out = _tunefarm(["db", "import", str(src)], env={"TUNEFARM_DB": url})
    assert code == 1 and "is read-only" in out and f"chmod u+w {path}" in out
    assert "the URL comes from $TUNEFARM_DB" in out


def test_a_nonsense_url_from_the_variable_is_named_with_its_fix() -> None:
    code, out = _tunefarm(["db", "stats"], env={"TUNEFARM_DB": "nonsense"})
    assert code == 1
    assert "not a database URL: 'nonsense' (the URL comes from $TUNEFARM_DB)" in out
    assert "set TUNEFARM_DB to such a URL, or unset it to use sqlite:///tunefarm.db" in out
    code, out = _tunefarm(["db", "stats", "--db", "nonsense"])
    assert code == 1 and "give --db such a URL" in out and "TUNEFARM_DB" not in out
    code, out = _tunefarm(["db", "stats"], env={"TUNEFARM_DB": "mysql://db/tf"})
    assert code == 1 and "unsupported database scheme 'mysql'" in out
    assert "the URL comes from $TUNEFARM_DB" in out
