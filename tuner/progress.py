"""Rich live display of a tuning job: trials done/total, per-task best, elapsed and ETA."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


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


def fmt_sec(sec: float | None) -> str:
    """Human latency: µs below a millisecond, else ms."""
    if sec is None:
        return "-"
    return f"{sec * 1e6:.1f} µs" if sec < 1e-3 else f"{sec * 1e3:.3f} ms"


class ProgressView:
    """A rich Live view of a job; ``None``-safe: pass ``console=None`` to stay silent."""

    def __init__(self, tasks: list[TaskState], total: int, console: Console | None) -> None:
        self.tasks = tasks
        self.console = console
        self.start = time.perf_counter()
        self.progress = Progress(
            TextColumn("[bold]tuning"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("trials"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        )
        self.bar = self.progress.add_task("trials", total=max(total, 1))
        self.live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.console is not None:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(None, None, None)
            self.live = None
            if self.console is not None and not self.console.is_terminal:
                self.console.print()

    def _render(self) -> Group:
        table = Table(box=None, padding=(0, 2))
        for col in ("task", "trials", "failed", "best", "GFLOPS"):
            table.add_column(col, justify="left" if col == "task" else "right", overflow="fold")
        for t in self.tasks:
            gf = t.gflops
            table.add_row(
                escape(t.name),
                str(t.trials),
                str(t.failed),
                fmt_sec(t.best_sec),
                f"{gf:.2f}" if gf else "-",
            )
        return Group(self.progress, table)

    def advance(self, n: int) -> None:
        """Count ``n`` more trials done and redraw."""
        self.progress.advance(self.bar, n)
        done = self.progress.tasks[0].completed
        if done > (self.progress.tasks[0].total or 0):  # the last round may overshoot
            self.progress.update(self.bar, total=done)
        if self.live is not None:
            self.live.update(self._render())
