"""The tunefarm CLI: bad input gives one line and exit 1; real commands on a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli_assert import one_line_error
from tests.conftest import TINY
from tuner.cli import app

runner = CliRunner()


@pytest.fixture
def broken_model(tmp_path: Path) -> Path:
    path = tmp_path / "broken.py"
    path.write_text("from tvm.script import relax as R\n\ndef oops(:\n    pass\n")
    return path


@pytest.fixture
def no_module(tmp_path: Path) -> Path:
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    return path


def test_unparseable_model(broken_model: Path, sqlite_url: str) -> None:
    result = runner.invoke(app, ["tune", str(broken_model), "--db", sqlite_url])
    one_line_error(result, "syntax error")


def test_file_without_irmodule(no_module: Path, sqlite_url: str) -> None:
    result = runner.invoke(app, ["tune", str(no_module), "--db", sqlite_url])
    one_line_error(result, "no IRModule named 'Module'")


def test_missing_model(tmp_path: Path, sqlite_url: str) -> None:
    result = runner.invoke(app, ["build", str(tmp_path / "nope.py"), "-o", "x.so"])
    one_line_error(result, "not found")


def test_unknown_target() -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--target", "tpu"])
    one_line_error(result, "unknown target preset 'tpu'")


def test_bad_target_json() -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--target", '{"kind": '])
    one_line_error(result, "not valid JSON")


def test_bogus_db_url() -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--db", "bogus://nowhere"])
    one_line_error(result, "unsupported database scheme")


def test_zero_trials(sqlite_url: str) -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--trials", "0", "--db", sqlite_url])
    one_line_error(result, "--trials must be at least 1")


def test_build_needs_an_existing_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    result = runner.invoke(app, ["build", str(TINY), "--db", url, "-o", str(tmp_path / "o.so")])
    one_line_error(result, "does not exist")
    assert not (tmp_path / "absent.db").exists()


def test_db_stats_json(sqlite_url: str) -> None:
    from database import Storage

    Storage(sqlite_url)
    result = runner.invoke(app, ["db", "stats", "--db", sqlite_url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {k: data[k] for k in ("workloads", "records", "failed_records", "jobs")} == {
        "workloads": 0,
        "records": 0,
        "failed_records": 0,
        "jobs": 0,
    }


@pytest.mark.slow
@pytest.mark.ray
def test_build_and_bench_from_tuned_db(tuned_db, tmp_path: Path) -> None:
    out = tmp_path / "tiny.so"
    result = runner.invoke(app, ["build", str(TINY), "--db", tuned_db.url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1/1 kernel calls from tuned records" in result.output and out.stat().st_size > 0
    js = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", str(TINY), "--db", tuned_db.url, "-o", str(js)])
    assert result.exit_code == 0, result.output
    (data,) = json.loads(js.read_text())["results"]
    assert data["agree"] and data["reference"] == "numpy" and data["tuned_share"] == 1.0
    assert data["untuned_sec"] > 0 and data["tuned_sec"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_installed_script_end_to_end(tuned_db, tmp_path: Path) -> None:
    """The installed `tunefarm` script in a real subprocess; the .so loads in a fresh process."""
    exe = Path(sys.executable).parent / "tunefarm"
    out = tmp_path / "tiny.so"
    env = {**os.environ, "TUNEFARM_DB": tuned_db.url}
    proc = subprocess.run(
        [str(exe), "build", str(TINY), "-o", str(out), "--strict"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    stats = subprocess.run(
        [str(exe), "db", "stats", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert json.loads(stats.stdout)["records"] >= 8
    check = (
        "import numpy as np, tvm; from tvm import relax;"
        f"lib = tvm.runtime.load_module({str(out)!r});"
        "vm = relax.VirtualMachine(lib, tvm.cpu());"
        "x = np.ones((32, 64), 'float32'); w = np.ones((64, 32), 'float32');"
        "print(vm['main'](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()[0, 0])"
    )
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert float(ran.stdout.strip()) == 64.0
    bad = subprocess.run(
        [str(exe), "tune", str(TINY), "--target", "tpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0
    assert "unknown target preset" in bad.stderr
