"""Drawing for the command line: the live view of a tune job, and the tables and notes of
what tune, plan, build and bench return."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

from tuner.bench.results import (
    NOISY,
    BenchResult,
    TrafficSummary,
    runtime_notes,
    shape_label,
    slower_note,
)
from tuner.progress import TaskState, fmt_sec

if TYPE_CHECKING:
    from tuner.compile import BuildReport
    from tuner.job import JobSummary
    from tuner.kernel_profile import KernelProfile
    from tuner.llm.bench import DecoderBenchReport
    from tuner.services import BenchReport


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
    # recorded: the tuned record's pooled median, spread and runs (✓: confirmed)
    for col in ("function", "calls", "time", "share", "recorded"):
        table.add_column(col, justify="left" if col == "function" else "right")
    total = profile.model_sec or 1.0
    shown, rest = profile.kernels[:top], profile.kernels[top:]
    for k in shown:
        ev = profile.evidence.get(k.name)
        recorded = (
            f"{fmt_sec(ev.median)} ±{100 * (ev.spread or 0):.0f}% "
            f"{ev.runs}{' ✓' if ev.confirmed else ''}"
            if ev is not None
            else "-"
        )
        share = f"{k.sec / total:.0%}"
        table.add_row(escape(k.name), str(k.calls), fmt_sec(k.sec), share, recorded)
    if rest:
        sec = sum(k.sec for k in rest)
        calls = sum(k.calls for k in rest)
        share = f"{sec / total:.0%}"
        table.add_row(f"{len(rest)} other functions", str(calls), fmt_sec(sec), share, "")
    table.add_row(
        "VM (allocations, shape checks, branches, builtins)",
        str(profile.vm_calls - profile.kernel_calls),
        fmt_sec(profile.rest_sec),
        f"{profile.rest_sec / total:.0%}",
        "",
        style="bold",
    )
    table.add_row("model (measured)", str(profile.vm_calls), fmt_sec(profile.model_sec), "100%", "")
    return table


def json_text(data: Any) -> str:
    """``data`` as the JSON every ``--json`` prints."""
    return json.dumps(data, indent=2, default=str)


# ----------------------------------------------------------------------------- tune
def print_tune_summary(console: Console, summary: JobSummary) -> None:
    """A finished job: per task trials, best latency and speedup, then budget and wall time."""
    table = Table(title=f"job {summary.job_name} (#{summary.job_id})")
    for col in ("task", "calls", "trials", "best latency", "GFLOPS", "untuned", "speedup"):
        table.add_column(col, justify="left" if col == "task" else "right", overflow="fold")
    for t in summary.tasks:
        table.add_row(
            escape(t.name),
            str(t.weight),
            str(t.trials),
            fmt_sec(t.best_sec),
            f"{t.gflops:.2f}" if t.gflops else "-",
            fmt_sec(t.baseline_sec),
            f"{t.speedup:.1f}x" if t.speedup else "-",
        )
    console.print(table)
    if summary.trials_before >= summary.trials_budget:
        console.print(
            f"budget of {summary.trials_budget} trials already spent "
            f"({summary.trials_before} recorded); nothing new measured"
        )
    elif summary.trials_before:
        console.print(
            f"resumed: {summary.trials_before} trials already in the database, "
            f"{summary.trials_measured} measured now"
        )
    for name in summary.skipped:
        console.print(f"[yellow]skipped[/yellow] {name}")
    converged = sum(t.converged for t in summary.tasks)
    if converged:
        console.print(
            f"converged: {converged} of {len(summary.tasks)} task(s) (expected gain below "
            f"--gain), {summary.trials_measured} trials measured"
        )
    if summary.stopped_by == "time_budget":
        console.print(
            f"time budget reached: {summary.trials_measured} of "
            f"{summary.trials_budget - summary.trials_before} trials measured"
        )
    share = summary.db_sec / summary.wall_sec if summary.wall_sec else 0.0
    console.print(
        f"wall time {summary.wall_sec:.1f} s (database {summary.db_sec:.2f} s, {share:.1%})"
    )
    search = summary.search
    if search.get("mode") == "thread":
        console.print(
            f"search: pipelined in a driver thread, {search['rounds']} rounds, "
            f"{search['actor_busy_sec']:.1f} s of search, driver waited {search['wait_sec']:.1f} s"
        )
    elif search.get("mode") == "ray":
        console.print(
            f"search: {search['actors']} actor(s) on {search['nodes']} node(s), "
            f"{search['rounds']} rounds, {search['actor_busy_sec']:.1f} s of search off the "
            f"driver, driver waited {search['wait_sec']:.1f} s"
            + (f", {search['restarts']} actor restart(s)" if search["restarts"] else "")
        )
    if search.get("sibling_tasks"):
        console.print(
            f"warm start: {search['sibling_tasks']} of {len(summary.tasks)} task(s) began with "
            f"{search['siblings']} of the database's best schedules of their kernel at other "
            "buckets, refitted"
        )
    if search.get("matvec_tasks"):
        console.print(
            f"matrix-vector: {search['matvec_tasks']} task(s) first measured a known tiling "
            "of one (--no-matvec: off)"
        )
    if search.get("gemm_tasks"):
        console.print(
            f"matrix product: {search['gemm_tasks']} task(s) first measured a known tiling "
            "of one (--no-gemm: off)"
        )
    if search.get("screened"):
        console.print(
            f"screened: {search['screened']} candidate(s) at {search['screen']:g}x their "
            "task's best or slower, timed by their single runs alone"
        )
    devices = summary.devices
    if devices.get("busy") is not None:
        console.print(
            f"devices busy measuring {devices['busy']:.0%} of the {devices['window_sec']:.1f} s "
            f"with budget left ({devices['slots']} device slot(s))"
        )


# ----------------------------------------------------------------------------- plan
def plan_tables(plan: Any) -> list[Any]:
    """The plan as rich tables: buckets (traffic, latency now and planned), then tasks."""
    var = plan.var
    buckets = Table(
        title=f"plan: buckets {var}={','.join(map(str, plan.buckets))}, "
        f"{plan.trials} of {plan.budget} trials"
    )
    for col in ("values", "traffic", "untuned", "now", "planned", "gain"):
        buckets.add_column(col, justify="left" if col == "values" else "right")
    lo = 1
    for row in plan.rows:
        span = f"{var} > {lo - 1}" if row.value is None else f"{var}={lo}..{row.value}"
        lo = (row.value or 0) + 1
        if row.share == 0:
            buckets.add_row(span, "0%", "-", "-", "-", "-")
            continue
        gain = f"{row.before_sec / row.after_sec:.2f}x" if row.after_sec else "-"
        buckets.add_row(
            span,
            f"{row.share:.1%}",
            fmt_sec(row.untuned_sec),
            fmt_sec(row.before_sec),
            fmt_sec(row.after_sec),
            gain,
        )
    buckets.add_row(
        "[bold]traffic mean[/bold]",
        "100%",
        fmt_sec(plan.untuned_sec),
        fmt_sec(plan.before_sec),
        fmt_sec(plan.after_sec),
        f"{plan.before_sec / plan.after_sec:.2f}x" if plan.after_sec else "-",
    )
    tasks = Table(title="trials per task (records after the job; the default schedule counts)")
    for col in ("task", "calls", "recorded", "trials", "now", "planned", "converged", "why"):
        tasks.add_column(col, justify="left" if col in ("task", "why") else "right")
    for t in plan.tasks:
        tasks.add_row(
            escape(t.name),
            str(t.calls),
            str(t.recorded),
            str(t.trials),
            fmt_sec(t.before_sec),
            fmt_sec(t.after_sec),
            convergence(t.converged, t.expected_gain),
            escape(t.why),
        )
    return [buckets, tasks]


def plan_notes(plan: Any) -> list[str]:
    """What the plan assumed and what it would give otherwise, a line each."""
    curve = plan.curve
    lines = [
        f"gain per trial, over every history: best/default = {curve.floor:.3f} + "
        f"{1 - curve.floor:.3f} * exp(-(t-1)/{curve.tau:g}) ({curve.source}); a task follows "
        "its family's measured curve where it has one, else its class's (matmul-like, "
        "reduction, injective) with its own roofline as floor"
    ]
    for label, sec in plan.alternatives:
        what = fmt_sec(sec) if sec is not None else "not feasible with this budget"
        lines.append(
            f"predicted traffic mean with {label}: {what} (planned: {fmt_sec(plan.after_sec)})"
        )
    lines += list(plan.notes)
    cal = plan.calibration
    if cal is None:
        lines.append("predicted figures are kernel time (VM and dispatch overheads not modelled)")
    else:
        factors = cal.factors()
        spread = f"{min(factors):.2f}-{max(factors):.2f}x" if factors else "-"
        lines.append(
            f"calibrated by this database's build, timed at {len(cal.values)} values "
            f"({plan.var}={cal.values[0]}..{cal.values[-1]}): its kernels ran at {spread} the "
            f"model's time, and {fmt_sec(min(cal.rest_sec))}-{fmt_sec(max(cal.rest_sec))} a "
            f"call went outside them; planned with it (kernel time alone: "
            f"{fmt_sec(plan.kernel_after_sec)})"
        )
    return lines


def print_plan(console: Console, plan: Any) -> None:
    """The plan's tables and notes."""
    for table in plan_tables(plan):
        console.print(table)
    for line in plan_notes(plan):
        console.print(escape(line))


def convergence(converged: bool | None, gain: float | None) -> str:
    """'yes' / 'no (+4% expected)' from the latest job that tuned a kernel; '—' if none."""
    if converged is None:
        return "—"
    left = f" (+{100 * gain:.0f}% expected)" if gain is not None else ""
    return ("yes" if converged else "no") + left


# ----------------------------------------------------------------------------- build
def build_dict(report: BuildReport, output: Path) -> dict[str, Any]:
    """``build --json``: the library written and where each kernel's schedule came from."""
    return {
        "output": str(output),
        "tuned_calls": report.tuned_calls,
        "total_calls": report.total_calls,
        "tuned_share": report.tuned_share,
        "kernels": [k.to_dict() for k in report.kernels],
    }


def print_build(console: Console, report: BuildReport, model: str, output: Path) -> None:
    """The kernels of a build: calls, schedule source, lookup, latency, dispatch."""
    table = Table(title=f"kernels of {model}")
    for col in ("kernel", "calls", "schedule", "lookup", "latency", "dispatch"):
        table.add_column(col, justify="right" if col in ("calls", "latency") else "left")
    styles = {"tuned": "green", "buckets": "green", "default": "green", "untuned": "yellow"}
    for k in report.kernels:
        table.add_row(
            k.name,
            str(k.calls),
            f"[{styles[k.source]}]{k.source}[/{styles[k.source]}]",
            k.level or "-",
            fmt_sec(k.mean_sec),
            escape(k.dispatch or "-"),
        )
    console.print(table)
    console.print(
        f"{report.tuned_calls}/{report.total_calls} kernel calls from tuned records "
        f"({report.tuned_share:.0%}); wrote {output}"
    )


# ----------------------------------------------------------------------------- bench
def bench_table(report: BenchReport) -> Table:
    """Tuned vs untuned vs the reference at each shape. Every ratio is the ratio of the two
    times printed beside it (the paired ratios are the side-by-side table's)."""
    ref = report.reference
    title = f"{report.model} on {report.target}: tuned vs untuned default"
    table = Table(
        title=title + (f" vs {ref}" if ref else ""),
        caption=f"speedup = untuned / tuned; vs {ref} = {ref} / tuned, of the times printed: "
        "above 1, tuned is faster"
        if ref
        else "speedup = untuned / tuned, of the times printed",
    )
    cols = ["shape", "untuned", "tuned", "speedup"]
    cols += [ref, f"vs {ref}"] if ref else []
    cols += ["max err", "kernels"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("shape", "kernels") else "right")
    for r in report.results:
        variants = ", ".join(f"{k}:{v}" for k, v in r.kernels.items()) or "-"
        speedup = escape(r.speedup_label)
        row = [
            shape_label(r.shape),
            fmt_sec(r.untuned_sec),
            fmt_sec(r.tuned_sec),
            f"[red]{speedup}[/red]" if r.slower else speedup,
        ]
        if ref:
            ratio = r.reference_sec / r.tuned_sec if r.reference_sec and r.tuned_sec else None
            row += [fmt_sec(r.reference_sec), f"{ratio:.2f}x" if ratio else "-"]
        row += [f"{r.max_abs_err:.1e}" + ("" if r.agree else " [red]DISAGREE[/red]")]
        table.add_row(*row, escape(variants))
    return table


def print_bench(console: Console, report: BenchReport) -> None:
    """bench's tables and notes: tuned vs untuned vs the reference, the slower shapes, the
    runtimes side by side, the traffic's latency, where the tuned build's time goes."""
    results = list(report.results)
    console.print(bench_table(report))
    ref = report.reference
    paired = [(shape_label(r.shape), r.paired[ref].ratio) for r in results if ref in r.paired]
    if paired:  # the ratio --json reports: both timed in one round, steadier under load
        console.print(
            f"{ref} / tuned in rounds timing the two back to back (median): "
            + ", ".join(f"{label} {ratio:.2f}x" for label, ratio in paired)
        )
    note = slower_note(results)
    if note:
        console.print(f"[red]{escape(note)}[/red]")
    side = runtimes_table(results, report.model)
    if side is not None:
        console.print(side)
    for line in runtime_notes(results):
        console.print(escape(line), style="red" if "MISMATCH" in line else None)
    res = results[0]
    console.print(
        f"outputs checked against the {res.reference} reference; "
        f"{res.tuned_share:.0%} of kernel calls tuned"
        + (f" (untuned: {', '.join(res.untuned_kernels)})" if res.untuned_kernels else "")
    )
    if report.traffic is not None:
        console.print(traffic_table(report.traffic, report.model))
    for r in results:
        if r.profile is not None:
            title = f"{report.model} tuned at {shape_label(r.shape)}"
            console.print(kernel_profile_table(r.profile, title))


def runtimes_table(results: list[BenchResult], title: str) -> Any:
    """The runtimes side by side at each shape (a rich Table), or None when no other runtime
    was asked for: TuneFarm tuned and untuned, the reference (PyTorch eager, numpy) and each
    other runtime with its time and, in parentheses, its time / tuned's time (above 1 the
    tuned build is faster); an output that does not match the reference is marked MISMATCH."""
    if not results or not results[0].runtimes:
        return None
    first = results[0]
    ref = first.reference if first.reference not in ("untuned",) else None
    names = [r.name for r in first.runtimes]
    table = Table(
        title=f"{title}: runtimes side by side, {first.threads} threads each",
        caption="(N.NNx) = that runtime's time / TuneFarm tuned's time, the median of rounds "
        "timing the two back to back: above 1, tuned is faster; noisy: spread over the "
        f"repeats (of a time, or of a ratio's rounds) above {NOISY:.0%}",
    )
    cols = ["shape", "tuned", "untuned", *([REF_NAMES.get(ref, ref)] if ref else []), *names]
    for col in cols:
        table.add_column(col, justify="left" if col == "shape" else "right")

    def ratio(value: float | None) -> str:
        return f" ({value:.2f}x)" if value else ""

    def noisy(spread: float | None) -> str:
        return " [yellow]noisy[/yellow]" if spread is not None and spread > NOISY else ""

    for r in results:
        row = [shape_label(r.shape), fmt_sec(r.tuned_sec) + noisy(r.spread.get("tuned"))]
        row.append(
            fmt_sec(r.untuned_sec)
            + ratio(r.untuned_sec / r.tuned_sec if r.tuned_sec else None)
            + noisy(r.spread.get("untuned"))
        )
        if ref:
            spread = max(r.spread.get("reference", 0.0), _paired_spread(r, ref))
            row.append(fmt_sec(r.reference_sec) + ratio(r.vs_reference) + noisy(spread))
        for name in names:
            rt = r.runtime(name)
            if rt is None or rt.sec is None:
                row.append("not run")
                continue
            spread = max(rt.spread or 0.0, _paired_spread(r, name))
            cell = escape(fmt_sec(rt.sec) + ratio(r.vs_runtime(name))) + noisy(spread)
            row.append(cell + (" [red]MISMATCH[/red]" if rt.agree is False else ""))
        if not r.agree:
            row[1] += " [red]MISMATCH[/red]"
        table.add_row(*row)
    return table


def _paired_spread(r: BenchResult, name: str) -> float:
    return r.paired[name].spread if name in r.paired else 0.0


REF_NAMES = {"pytorch": "pytorch eager"}


def traffic_table(summary: TrafficSummary, title: str) -> Any:
    """The traffic summary as a rich Table: one row per runtime, mean / p50 / p99."""
    table = Table(title=f"{title}: latency over the traffic of {summary.profile}")
    for col in ("runtime", "mean", "p50", "p99", "mean vs tuned"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    tuned = summary.stats.get("tuned")
    for name, st in summary.stats.items():
        ratio = f"{st.mean_sec / tuned.mean_sec:.2f}x" if tuned and tuned.mean_sec else "-"
        table.add_row(
            REF_NAMES.get(name, name),
            fmt_sec(st.mean_sec),
            fmt_sec(st.p50_sec),
            fmt_sec(st.p99_sec),
            ratio,
        )
    return table


# ------------------------------------------------------------------------ bench (decoder)
def decoder_bench_table(report: DecoderBenchReport) -> Table:
    """Prefill per prompt length and decode per context length: each variant's time and, in
    parentheses, its time / tuned's (the median of per-round ratios: above 1, tuned is
    faster), the decode step's bandwidth bound and tuned's share of it."""
    from tuner.llm.bench import COMPILED, TUNED, VARIANTS

    table = Table(
        title=f"{report.model}: prefill and decode, {report.threads} threads each",
        caption="prefill: ms per prompt; decode: ms per token after CONTEXT cached tokens; "
        "(N.NNx) = that time / tuned's, median of rounds timing all side by side; bound = "
        "bytes a decode step reads / memory bandwidth",
    )
    ran = [n for n in VARIANTS if n in report.errors or any(n in r.sec for r in report.rows)]
    for col in ("phase", "length", *ran, "bound", "tuned/bound"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for row in report.rows:
        cells = []
        for name in ran:
            sec = row.sec.get(name)
            if sec is None:
                note = "not compiled" if name == COMPILED and row.phase == "prefill" else "-"
                cells.append(note if name not in report.errors else "failed")
                continue
            cell = f"{sec * 1e3:.3f}"
            if name != TUNED and name in row.vs_tuned:
                cell += f" ({row.vs_tuned[name]:.2f}x)"
            check = row.checks.get(name)
            if check is not None and not check.ok:
                cell += " [red]MISMATCH[/red]"
            cells.append(cell)
        bound = frac = "-"
        if row.bound_sec is not None:
            bound = f"{row.bound_sec * 1e3:.3f}"
            if TUNED in row.sec:
                frac = f"{row.bound_sec / row.sec[TUNED]:.0%}"
        table.add_row(row.phase, str(row.length), *cells, bound, frac)
    return table


def print_decoder_bench(console: Console, report: DecoderBenchReport) -> None:
    """bench's table on a decoder, the variants that did not run, the bound's inputs and the
    output check."""
    console.print(decoder_bench_table(report))
    for name, why in report.errors.items():
        console.print(f"{escape(name)} did not run: {escape(why)}", style="red", highlight=False)
    console.print(
        f"memory bandwidth (STREAM triad, {report.threads} threads): "
        f"{report.bandwidth / 1e9:.1f} GB/s; a decode step reads "
        f"{report.weight_bytes / 1e6:.2f} MB of weights plus the KV cache",
        highlight=False,
    )
    bad = [
        f"{r.phase} {r.length} {n}" for r in report.rows for n, c in r.checks.items() if not c.ok
    ]
    share = (
        "" if report.tuned_share is None else f"; {report.tuned_share:.0%} of kernel calls tuned"
    )
    console.print(
        ("logits checked against PyTorch eager: all close, same argmax" if not bad else
         f"[red]logits differ from PyTorch eager: {escape(', '.join(bad))}[/red]") + share
    )  # fmt: skip
