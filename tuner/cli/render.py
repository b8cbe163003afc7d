"""Drawing for the command line: the live view of a tune job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from tuner.kernel_profile import KernelProfile


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


def kernel_profile_table(profile: KernelProfile, title: str, top: int = 12) -> Table:
    """Where one model call's time goes: its heaviest kernels (each timed alone), the rest
    of the kernels, and the VM's own work (the model's time outside its kernels)."""
    noisy = profile.kernel_sec > 1.1 * profile.model_sec
    table = Table(
        title=title,
        caption="the kernels timed alone took longer than the whole model: a busy machine, "
        "the figures are noisy"
        if noisy
        else None,
    )
    for col in ("function", "calls", "time", "share"):
        table.add_column(col, justify="left" if col == "function" else "right")
    total = profile.model_sec or 1.0
    shown, rest = profile.kernels[:top], profile.kernels[top:]
    for k in shown:
        table.add_row(escape(k.name), str(k.calls), fmt_sec(k.sec), f"{k.sec / total:.0%}")
    if rest:
        sec = sum(k.sec for k in rest)
        calls = sum(k.calls for k in rest)
        share = f"{sec / total:.0%}"
        table.add_row(f"{len(rest)} other functions", str(calls), fmt_sec(sec), share)
    table.add_row(
        "VM (allocations, shape checks, branches, builtins)",
        str(profile.vm_calls - profile.kernel_calls),
        fmt_sec(profile.rest_sec),
        f"{profile.rest_sec / total:.0%}",
        style="bold",
    )
    table.add_row("model (measured)", str(profile.vm_calls), fmt_sec(profile.model_sec), "100%")
    return table
