"""Drawing for the command line: the live view of a tune job."""

from __future__ import annotations

from collections.abc import Sequence

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

from tuner.progress import TaskState, fmt_sec


class LiveProgress:
    """A :class:`tuner.progress.JobProgress` drawn as a rich Live view: trials done/total,
    elapsed and ETA, and per task its trials, failures, best latency and GFLOPS."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.tasks: Sequence[TaskState] = ()
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
        self.bar = self.progress.add_task("trials", total=1, start=False)
        self.live: Live | None = None

    def start(self, tasks: Sequence[TaskState], total: int) -> None:
        self.tasks = tasks
        self.progress.update(self.bar, total=max(total, 1))
        self.progress.start_task(self.bar)
        self.live = Live(self._render(), console=self.console, refresh_per_second=4)
        self.live.__enter__()

    def stop(self) -> None:
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(None, None, None)
            self.live = None
            if not self.console.is_terminal:
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
