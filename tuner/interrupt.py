"""Ctrl-C during a tuning job: stop at the next round, keep what was measured.

MetaSchedule's task loop runs in C++ and calls back into Python for every build, run and
cost-model query, so Python's default SIGINT handler raises ``KeyboardInterrupt`` wherever
the next callback happens to be, where TVM may swallow it (a job once ran to the end of its
budget through a Ctrl-C). Instead, for the length of a job, the first SIGINT only asks the
job to stop: the trial budget is closed and the builder raises
:class:`workers.ledger.Interrupted` at its next batch, which unwinds the search from one
well-defined place. A second SIGINT is Python's default again (``KeyboardInterrupt`` now).

A job's time budget (``tune --time-budget``) ends its search the same way, from a timer
(:func:`deadline`), except that the job then ends as usual: :func:`until_time_is_up` lets the
search's unwinding end it quietly.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from workers.ledger import TrialBudget

NOTICE = "stopping the job after the current round (Ctrl-C again to abort now)"


@contextlib.contextmanager
def stop_on_sigint(on_stop: Callable[[], None], notice: str = NOTICE) -> Iterator[None]:
    """Within the block, the first SIGINT calls ``on_stop`` (once) and restores the previous
    handler; outside the main thread (where Python cannot install handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C acts at once
        print(notice, file=sys.stderr, flush=True)
        on_stop()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def deadline(seconds: float | None, on_time: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``on_time`` is called (from a timer thread) once ``seconds`` have
    passed; None: never. Leaving the block cancels a timer that has not fired and waits for
    one that is firing, so ``on_time`` never runs after the block."""
    if seconds is None:
        yield
        return
    timer = threading.Timer(max(0.0, seconds), on_time)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


@contextlib.contextmanager
def until_time_is_up(budget: TrialBudget) -> Iterator[None]:
    """Within the block, an exception raised after ``budget`` was closed by the time budget
    (the search unwound by the builder's :class:`workers.ledger.Interrupted`, however
    MetaSchedule's C++ loop passes it on) ends the block quietly; any other propagates."""
    try:
        yield
    except Exception:
        if budget.closed_by != "time":
            raise


__all__ = ["NOTICE", "deadline", "stop_on_sigint", "until_time_is_up"]
