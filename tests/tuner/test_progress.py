"""What a job reports while it runs, where no live view can draw (a log, a pipe)."""

from __future__ import annotations

import io
import time

import pytest

from tuner.progress import LineProgress, TaskState


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_line_progress_writes_a_line_at_start_while_running_and_at_the_end() -> None:
    out = io.StringIO()
    tasks = [TaskState(name="a", flops=None), TaskState(name="b", flops=None)]
    view = LineProgress(out, every=0.05)
    view.start(tasks, 4)
    view.advance(2)  # the records before the search: the first line counts them
    first = _lines(out)[0]
    assert first.startswith("tuning: 2/4 trials, ") and first.endswith(
        "0 of 2 task(s) timed, 0 failed"
    )
    tasks[0].best_sec, tasks[1].failed = 1e-3, 1
    until = time.monotonic() + 30
    while (
        not _lines(out)[-1].endswith("1 of 2 task(s) timed, 1 failed") and time.monotonic() < until
    ):
        time.sleep(0.01)  # lines come while it runs, not only at the end
    assert len(_lines(out)) >= 2 and _lines(out)[-1].startswith("tuning: 2/4 trials, ")
    view.advance(2)
    view.stop()
    n = len(_lines(out))
    assert _lines(out)[-1].startswith("tuning: 4/4 trials, ")
    assert _lines(out)[-1].endswith("1 of 2 task(s) timed, 1 failed")
    time.sleep(0.2)
    assert len(_lines(out)) == n  # nothing after the end


def test_line_progress_stops_cleanly_when_never_started() -> None:
    out = io.StringIO()
    LineProgress(out).stop()
    assert out.getvalue() == ""
    with pytest.raises(ValueError, match="positive"):
        LineProgress(out, every=0)
