"""Ctrl-C during a tuning job: stop at the next round, keep what was measured.

MetaSchedule's task loop runs in C++ and calls back into Python for every build, run and
cost-model query, so Python's default SIGINT handler raises ``KeyboardInterrupt`` wherever
the next callback happens to be, where TVM may swallow it (a job once ran to the end of its
budget through a Ctrl-C). Instead, for the length of a job, the first SIGINT only asks the
job to stop: the trial budget is closed and the builder raises
:class:`workers.ledger.Interrupted` at its next batch, which unwinds the search from one
well-defined place. A second SIGINT is Python's default again (``KeyboardInterrupt`` now).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

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


__all__ = ["NOTICE", "stop_on_sigint"]
