"""Ctrl-C during a tune: the job stops at its next round, keeps its records, exits 130."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TINY
from tuner.interrupt import NOTICE, deadline, stop_on_sigint, until_time_is_up
from workers.ledger import Interrupted, TrialBudget


def test_first_sigint_asks_to_stop_second_interrupts() -> None:
    calls: list[int] = []
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in the CLI
    try:
        with pytest.raises(KeyboardInterrupt), stop_on_sigint(lambda: calls.append(1)):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs between bytecodes
            assert calls == [1]
            os.kill(os.getpid(), signal.SIGINT)  # the default handler is back: raises
            time.sleep(1)
        assert calls == [1]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_handler_is_restored_when_nothing_happened() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_sigint(lambda: None):
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


def test_closing_a_budget_spends_it() -> None:
    budget = TrialBudget(5)
    assert budget.take()
    assert budget.close() == 4
    assert budget.left == 0 and not budget.take()


def test_first_reason_to_close_a_budget_is_kept() -> None:
    budget = TrialBudget(5)
    assert budget.closed_by is None
    budget.close("time")
    budget.close("user")
    assert budget.closed_by == "time" and budget.left == 0


def test_deadline_fires_once_and_never_after_its_block() -> None:
    fired: list[float] = []
    start = time.monotonic()
    with deadline(0.2, lambda: fired.append(time.monotonic() - start)):
        time.sleep(0.5)
    assert len(fired) == 1 and 0.2 <= fired[0] < 0.5
    with deadline(0.2, lambda: fired.append(-1.0)):
        pass  # left before the time: cancelled
    with deadline(None, lambda: fired.append(-1.0)):
        time.sleep(0.3)
    time.sleep(0.3)
    assert len(fired) == 1


def test_only_a_time_budget_unwinding_ends_quietly() -> None:
    budget = TrialBudget(5)
    with pytest.raises(Interrupted), until_time_is_up(budget):  # still open: a real failure
        raise Interrupted("unexpected")
    budget.close("user")
    with pytest.raises(Interrupted), until_time_is_up(budget):  # Ctrl-C goes on up
        raise Interrupted("the job was interrupted")
    timed = TrialBudget(5)
    timed.close("time")
    with until_time_is_up(timed):  # however MetaSchedule passed it on
        raise RuntimeError("TVMError: Interrupted: the job was stopped")


def _records(db: Path) -> int:
    """The trials stored: schedules, not records (a new best's confirmation is a record too)."""
    try:
        with sqlite3.connect(db) as conn:
            query = "SELECT COUNT(DISTINCT candidate_hash || target_key) FROM tuning_records"
            return conn.execute(query).fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def _job_status(db: Path) -> str | None:
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT status FROM jobs").fetchone()
    except sqlite3.Error:  # not created yet
        return None
    return row[0] if row else None


def _interrupted_tune(db: Path, args: list[str], ready: Callable[[Path], bool]) -> tuple[int, str]:
    """``tunefarm tune`` of this tree into ``db``, sent a terminal's Ctrl-C (SIGINT to its
    whole process group, Ray's processes included) once ``ready(db)``: its exit code and
    stderr."""
    cmd = [sys.executable, "-m", "tuner.cli", "tune", str(TINY), "--trials", "48", *args]
    proc = subprocess.Popen(
        [*cmd, "--db", f"sqlite:///{db}"],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not ready(db) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the job ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("search", ["thread", "driver"])
def test_ctrl_c_stops_a_tune_and_keeps_its_records(tmp_path: Path, search: str) -> None:
    """A Ctrl-C while the pipelined search (the default here) or MetaSchedule's C++ task loop
    runs."""
    db = tmp_path / "t.db"
    args = ["--per-iter", "4", "--search", search, "--seed", "0"]
    code, err = _interrupted_tune(db, args, lambda db: _records(db) >= 3)
    assert code == 130, err
    assert NOTICE in err and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("interrupted: job ") and "records are kept" in line
    kept = _records(db)
    assert 3 <= kept < 48
    with sqlite3.connect(db) as conn:
        status, error, done = conn.execute("SELECT status, error, trials_done FROM jobs").fetchone()
    assert status == "interrupted" and error.startswith("interrupted by the user")
    assert done == kept and f"stopped after {kept} of 48 trials" in line  # one count


@pytest.mark.slow
@pytest.mark.ray
def test_ctrl_c_as_the_job_starts_records_it_interrupted(tmp_path: Path) -> None:
    """A Ctrl-C as soon as the job's row exists (Ray still starting, nothing measured) ends
    the job ``interrupted``, not ``failed`` (nor ``done`` after its baselines)."""
    db = tmp_path / "t.db"
    code, err = _interrupted_tune(db, [], lambda db: _job_status(db) is not None)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted: job ")
    with sqlite3.connect(db) as conn:
        status, error, done = conn.execute("SELECT status, error, trials_done FROM jobs").fetchone()
    assert status == "interrupted" and error.startswith("interrupted by the user")
    assert done == _records(db) < 48  # the job row counts what was recorded
