"""What a finished job reports: per task and for the job."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskSummary:
    """End-of-job figures for one task."""

    name: str
    weight: int
    trials: int
    failed: int
    best_sec: float | None
    baseline_sec: float | None
    flops: float | None
    # the gain its search may still find, a fraction of its best (tuner.search.convergence;
    # None: the pipelined search measured no round of it), and whether it stopped on it
    expected_gain: float | None = None
    converged: bool = False
    # new candidates its pipelined search measured, and how many it had when it converged
    # (None: not converged); a converged task gets no round after, so the two are equal
    searched: int = 0
    converged_at: int | None = None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.best_sec / 1e9 if self.flops and self.best_sec else None

    @property
    def speedup(self) -> float | None:
        if self.best_sec and self.baseline_sec:
            return self.baseline_sec / self.best_sec
        return None


@dataclass(frozen=True)
class JobSummary:
    """End-of-job figures."""

    job_id: int
    job_name: str
    tasks: list[TaskSummary]
    trials_budget: int
    trials_before: int
    trials_measured: int
    resumed_hits: int
    wall_sec: float
    skipped: list[str]
    db_sec: float = 0.0  # time spent in database transactions (the driver's share)
    # the driver's wall time by phase: startup (extraction, Ray), build_wait, run_wait,
    # database, probes (preparing the untuned defaults before the search and the dispatch
    # rule's probes after it, less their waits), search (the rest: search strategy, cost
    # model, MetaSchedule bookkeeping)
    phases: dict[str, float] = field(default_factory=dict)
    # how the search ran: mode, and for "ray" its actors, nodes, rounds, restarts, and the
    # search work done off the driver (actor_busy_sec)
    search: dict[str, Any] = field(default_factory=dict)
    # how busy the devices were while the job had budget left (from Ray being up to the
    # budget spent): busy_sec (the device actors' time on candidates), window_sec, slots and
    # busy = busy_sec / (window_sec * slots)
    devices: dict[str, Any] = field(default_factory=dict)
    # why the search ended: "trials" (spent), "time_budget", "converged" (every task, with
    # --until-converged), "interrupted", or None (nothing left to search)
    stopped_by: str | None = None
    # a symbolic model's buckets: variable -> the values its tasks were tuned at
    buckets: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for t, d in zip(self.tasks, out["tasks"], strict=True):
            d["gflops"], d["speedup"] = t.gflops, t.speedup
        return out


def device_busy(busy_sec: float, window_sec: float, slots: int) -> dict[str, Any]:
    """The job summary's ``devices`` entry: the share of the devices' time spent measuring."""
    busy = busy_sec / (window_sec * slots) if window_sec > 0 and slots else None
    return {"busy_sec": busy_sec, "window_sec": window_sec, "slots": slots, "busy": busy}
