"""The dashboard's server over real databases: read-only opening and its one-line errors,
the token check, escaping, and the JSON twins of every page (no browser: see test_browser)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from database import DatabaseError, Storage
from database.jobs import start_job, update_job
from tests.cli_assert import one_line_error
from tests.conftest import DATA, pg_database
from tests.tuner.dashboard.server import XSS, get, serve
from tuner.cli import app
from tuner.cli.dashboard import is_loopback
from tuner.dashboard.app import DashboardConfig
from tuner.dashboard.db import open_read_only

runner = CliRunner()


@pytest.fixture
def xss_db(tmp_path: Path) -> str:
    """A real empty TuneFarm database holding one job whose names are HTML."""
    url = f"sqlite:///{tmp_path / 'xss.db'}"
    storage = Storage(url)
    start_job(storage, name=XSS, model=XSS, target_json="{}", budget=4, submitted_by=XSS)
    storage.dispose()
    return url


def test_missing_foreign_and_old_databases_are_one_line_and_exit_1(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    (tmp_path / "text.db").write_text("not a database")
    old = tmp_path / "old.db"
    shutil.copy(DATA / "schema_v1.db", old)
    cases = {
        str(tmp_path / "none.db"): "does not exist",
        str(foreign): "not a TuneFarm database",
        str(tmp_path / "text.db"): "not an SQLite database",
        str(old): "tunefarm db upgrade",
    }
    for path, needle in cases.items():
        before = Path(path).read_bytes() if Path(path).exists() else None
        result = runner.invoke(app, ["dashboard", "--db", f"sqlite:///{path}", "--port", "1"])
        one_line_error(result, needle)
        assert (Path(path).read_bytes() if Path(path).exists() else None) == before


def test_the_database_is_opened_read_only(xss_db: str) -> None:
    db = open_read_only(xss_db)
    try:
        with db.engine.connect() as conn, pytest.raises(Exception, match="readonly"):
            conn.exec_driver_sql("DELETE FROM jobs")
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_is_read_only_and_its_password_never_shown() -> None:
    with pg_database() as url:
        _postgres_read_only_without_password(url)


def _postgres_read_only_without_password(url: str) -> None:
    from sqlalchemy.engine import make_url

    Storage(url).dispose()
    secret = make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
    db = open_read_only(secret)
    try:
        assert "s3cret-pw" not in db.where
        with db.engine.connect() as conn, pytest.raises(Exception, match="read-only"):
            conn.exec_driver_sql("DELETE FROM jobs")
    finally:
        db.dispose()
    with serve(secret) as base:
        for path in ("/", "/devices", "/models", "/api/jobs"):
            status, body, _ = get(base + path)
            assert status == 200 and "s3cret-pw" not in body


def test_every_page_and_its_twin_escape_names_from_the_database(xss_db: str) -> None:
    with serve(xss_db) as base:
        for path in ("/", "/jobs/1", "/models", "/models/" + XSS, "/compare?a=1&b=1"):
            status, body, headers = get(base + path.replace(" ", "%20"))
            assert status == 200, path
            assert XSS not in body and "&lt;img src=x onerror=alert(1)&gt;" in body, path
            assert "script-src 'self'" in headers["content-security-policy"]
        status, body, _ = get(base + "/api/jobs")
        assert status == 200 and json.loads(body)[0]["name"] == XSS
        assert get(base + "/jobs/9")[0] == 404 and get(base + "/api/jobs/9")[0] == 404
        assert get(base + "/api/workloads/9")[0] == 404


def test_a_token_is_checked_on_every_request(xss_db: str) -> None:
    token = "tok-" + "x" * 20
    with serve(xss_db, token=token) as base:
        for path in ("/", "/api/jobs", "/static/dashboard.js", "/jobs/1"):
            assert get(base + path)[0] == 401
            assert get(base + path + "?token=wrong-token-123")[0] == 401
        status, _, headers = get(base + "/?token=" + token)
        assert status == 200 and "HttpOnly" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        assert get(base + "/api/jobs", {"Cookie": cookie})[0] == 200
        assert get(base + "/api/jobs", {"Authorization": f"Bearer {token}"})[0] == 200


def test_off_loopback_the_command_wants_a_token(xss_db: str) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    result = runner.invoke(app, ["dashboard", "--db", xss_db, "--token", "short"])
    one_line_error(result, "--token")
    with pytest.raises(ValueError, match="8 characters"):
        DashboardConfig(db=open_read_only(xss_db), token="short")


def test_not_a_url_is_one_line() -> None:
    with pytest.raises(DatabaseError, match="unsupported database scheme"):
        open_read_only("mysql://u@h/db")


def test_finished_jobs_kernels_are_read_once_and_again_when_the_job_changes(
    sqlite_url: str,
) -> None:
    from database.models import RecordRow, WorkloadRow
    from tuner.dashboard.queries import FinishedJobs, jobs

    storage = Storage(sqlite_url)
    job_id = start_job(storage, name="j", model="m", target_json="{}", budget=9)

    def add_record(n: int) -> None:
        def add(session: Any) -> None:
            w = WorkloadRow(shash=f"s{n}", mod_json="{}", tvm_version="0")
            session.add(w)
            session.flush()
            session.add(
                RecordRow(
                    workload_id=w.id,
                    candidate_hash=f"c{n}",
                    trace_json="[]",
                    args_info_json="[]",
                    mean_sec=1e-3,
                    target_key="t",
                    target_json="{}",
                    target_kind="llvm",
                    job_id=job_id,
                )
            )

        storage.run(add)

    db, cache = open_read_only(sqlite_url), FinishedJobs()

    def kernels() -> int:
        with db.engine.connect() as conn:
            return jobs(conn, cache=cache)[0]["kernels"]

    add_record(1)
    assert kernels() == 1
    add_record(2)
    assert kernels() == 2  # running: read every time
    update_job(storage, job_id, status="done", trials_done=2)
    assert kernels() == 2
    add_record(3)  # a record filed under a finished job, its row unchanged: the cache holds
    assert kernels() == 2
    update_job(storage, job_id, trials_done=3)
    assert kernels() == 3
    db.dispose()
    storage.dispose()


def test_a_workloads_best_is_the_schedule_the_build_applies(sqlite_url: str) -> None:
    """The workload page's best trace and the job page's database best are the lowest pooled
    median (what ``db best`` and the build choose), not the record with the lowest mean."""
    from database.models import RecordRow, WorkloadRow
    from tuner.dashboard.queries import job, workload

    storage = Storage(sqlite_url)
    job_id = start_job(storage, name="j", model="m", target_json="{}", budget=3)
    lucky = '[[["A"]], []]'  # one run of three: a fast median, a slow mean
    steady = '[[["B"]], []]'  # two timed runs, both at 0.9 ms

    def add(session: Any) -> int:
        w = WorkloadRow(shash="s", mod_json="{}", tvm_version="0")
        session.add(w)
        session.flush()
        runs = [("a", lucky, [0.4e-3, 0.4e-3, 2.2e-3])] + [("b", steady, [0.9e-3])] * 2
        for cand, trace, secs in runs:
            mean = sum(secs) / len(secs)
            session.add(
                RecordRow(
                    workload_id=w.id,
                    candidate_hash=cand,
                    trace_json=trace,
                    args_info_json="[]",
                    run_secs_json=json.dumps(secs),
                    mean_sec=mean,
                    median_sec=sorted(secs)[len(secs) // 2],
                    rank_sec=mean,
                    target_key="t",
                    target_json="{}",
                    target_kind="llvm",
                    job_id=job_id,
                )
            )
        return w.id

    wid = storage.run(add)
    db = open_read_only(sqlite_url)
    with db.engine.connect() as conn:
        page = workload(conn, wid)
        job_page = job(conn, job_id)
    assert page is not None and job_page is not None
    (kernel,) = job_page["kernels"]
    assert kernel["best_sec"] == pytest.approx(0.9e-3)  # the job's fastest single mean
    assert kernel["database_best_sec"] == pytest.approx(0.4e-3)  # the build's best
    assert page["records"][0]["mean_sec"] == pytest.approx(0.9e-3)  # the fastest single mean
    assert '["A"]' in page["best_trace"]  # but the build's best is the lowest pooled median
    assert page["best_evidence"] == {
        "runs": 1,
        "samples": 3,
        "median": pytest.approx(0.4e-3),
        "spread": pytest.approx((1.3e-3 - 0.4e-3) / 0.4e-3),  # inclusive quartiles 0.4, 1.3
        "confirmed": False,
    }
    db.dispose()
    storage.dispose()
