"""What a tuning job reports while it runs: per-task numbers (:class:`TaskState`) and the
:class:`JobProgress` callback a caller passes to :func:`tuner.job.tune`. Library code does not
draw: the CLI's rich view on a terminal is :class:`tuner.cli.render.LiveProgress`; elsewhere
(a log, a pipe) :class:`LineProgress` writes a plain line every few seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO


@dataclass
class TaskState:
    """Live per-task numbers."""

    name: str
    flops: float | None
    trials: int = 0
    failed: int = 0
    best_sec: float | None = None
    baseline_sec: float | None = None

    @property
    def gflops(self) -> float | None:
        if self.flops and self.best_sec:
            return self.flops / self.best_sec / 1e9
        return None


class JobProgress(Protocol):
    """The callback of a tune job: ``start`` once the search begins (the tasks' live states
    and the job's trial budget), ``advance`` by the trials recorded (first by those recorded
    before the search: the records already there and the untuned defaults), ``stop`` at the
    end (also when the job fails). The trials advanced never pass the budget."""

    def start(self, tasks: Sequence[TaskState], total: int) -> None: ...

    def advance(self, n: int) -> None: ...

    def stop(self) -> None: ...


class SilentProgress:
    """A :class:`JobProgress` that reports nothing."""

    def start(self, tasks: Sequence[TaskState], total: int) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def stop(self) -> None:
        pass


# seconds between two lines of a LineProgress
LINE_EVERY_SEC = 5.0


class LineProgress:
    """A :class:`JobProgress` for a log or a pipe, where a live view shows nothing until the
    end: a line when the search starts, one every ``every`` seconds while it runs, and one at
    the end, each with the trials done of the budget, the time so far and the tasks timed.
    The first line waits for the first ``advance`` (the trials recorded before the search)."""

    def __init__(self, stream: TextIO | None = None, every: float = LINE_EVERY_SEC) -> None:
        if every <= 0:
            raise ValueError(f"every must be positive (got {every})")
        self.stream, self.every = stream, every
        self.tasks: Sequence[TaskState] = ()
        self.total = self.done = 0
        self._started = 0.0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._written = False

    def start(self, tasks: Sequence[TaskState], total: int) -> None:
        self.tasks, self.total = tasks, total
        self._started = time.monotonic()
        self._stopped.clear()
        self._written = False
        self._thread = threading.Thread(target=self._tick, name="tunefarm-progress", daemon=True)
        self._thread.start()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
        if not self._written:
            self._write()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stopped.set()
        self._thread.join()
        self._thread = None
        self._write()

    def line(self) -> str:
        """The progress as one line."""
        with self._lock:
            done = self.done
        timed = sum(1 for t in self.tasks if t.best_sec is not None)
        failed = sum(t.failed for t in self.tasks)
        elapsed = time.monotonic() - self._started
        return (
            f"tuning: {done}/{self.total} trials, {elapsed:.0f} s, "
            f"{timed} of {len(self.tasks)} task(s) timed, {failed} failed"
        )

    def _tick(self) -> None:
        while not self._stopped.wait(self.every):
            self._write()

    def _write(self) -> None:
        self._written = True
        print(self.line(), file=self.stream or sys.stdout, flush=True)


def fmt_sec(sec: float | None) -> str:
    """Human latency: µs below a millisecond, else ms."""
    if sec is None:
        return "-"
    return f"{sec * 1e6:.1f} µs" if sec < 1e-3 else f"{sec * 1e3:.3f} ms"
