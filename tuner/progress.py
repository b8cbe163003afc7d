"""What a tuning job reports while it runs: per-task numbers (:class:`TaskState`) and the
:class:`JobProgress` callback a caller passes to :func:`tuner.job.tune`. Library code does not
draw: the CLI's rich view is :class:`tuner.cli.render.LiveProgress`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


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
    and the trials it may run), ``advance`` after each recorded round, ``stop`` at the end
    (also when the job fails)."""

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


def fmt_sec(sec: float | None) -> str:
    """Human latency: µs below a millisecond, else ms."""
    if sec is None:
        return "-"
    return f"{sec * 1e6:.1f} µs" if sec < 1e-3 else f"{sec * 1e3:.3f} ms"
