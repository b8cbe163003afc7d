"""What a plan is: its buckets, the trials per task, the figures it expects, and the
calibration a re-plan applies."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.planner.curves import GainCurve


@dataclass(frozen=True)
class PlannedTask:
    name: str  # the job's task name (``fused_matmul_add[s=64]``)
    kernel: str
    bucket: int | None
    calls: int
    recorded: int
    trials: int  # records it should have after the job
    before_sec: float | None  # its best time now (None: never measured)
    after_sec: float  # predicted after ``trials``
    serves: float  # share of traffic whose calls of the kernel it runs
    why: str
    # how the latest job that tuned it ended (None: no job stored it)
    converged: bool | None = None
    expected_gain: float | None = None


@dataclass(frozen=True)
class BucketRow:
    """Values up to ``value`` (above the previous bucket; None: above every bucket)."""

    value: int | None
    share: float
    untuned_sec: float
    before_sec: float
    after_sec: float


@dataclass(frozen=True)
class Plan:
    var: str
    buckets: tuple[int, ...]
    budget: int
    tasks: tuple[PlannedTask, ...]
    rows: tuple[BucketRow, ...]
    untuned_sec: float  # expected latency, untuned build
    before_sec: float  # with what the database has now
    after_sec: float  # predicted after the plan
    curve: GainCurve
    alternatives: tuple[tuple[str, float | None], ...] = ()
    notes: tuple[str, ...] = ()
    # the built module timed between stages: the plan was made with it, and before and after
    # are calibrated by it (untuned is not: another module); kernel_after_sec: the same
    # plan's kernel-time figure
    calibration: Calibration | None = None
    kernel_after_sec: float | None = None

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    def task_trials(self) -> tuple[tuple[str, int], ...]:
        return tuple((t.name, t.trials) for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["trials"] = self.trials
        out["alternatives"] = dict(self.alternatives)
        return out


Chosen = dict[str, dict[int, int]]  # kernel -> bucket -> trials


@dataclass(frozen=True)
class Calibration:
    """The database's build timed at some of the profile's values (``values``): the whole
    call (``measured_sec``) and each kernel alone (:mod:`tuner.kernel_profile`), against the
    kernel-time model of the same database. What it corrects, kernel by kernel:

    - ``generic``: a kernel's generic code, measured / modelled at the values where the build
      ran it (interpolated between them, held beyond): generic code far off its bucket runs
      at other speeds than scaled from there;
    - ``bucket``: a kernel's bucket kernels, measured / modelled at the values up to its
      largest bucket where the build ran one (interpolated, held beyond): a large bucket's
      kernel padded down to small values runs at another factor than at its own size (the
      MLP's at 0.03-0.04x their figure at b = 6-10 and 0.7-0.9x at 179-223 in one run; one
      median over such values put the large ones at a quarter of their time);
    - ``above``: the one kernel that serves every value above its largest bucket (a range
      kernel padded far past its bucket, or a static one), measured / modelled at those
      values, interpolated (on the transformer block 1.3-4.5x its figure);
    - ``static``: the kernels without the variable, likewise;
    - ``rest_sec``: what the call spends outside the model's kernels (the VM's allocations,
      shape checks and branches, the pads and crops, the kernels' slowdown on the model's
      caches), added at each value (interpolated).

    The factors are the kernels', not the values': a plan that moves a value from generic code
    to a new bucket's kernel takes that kernel's factor there."""

    values: tuple[int, ...]
    measured_sec: tuple[float, ...]
    modelled_sec: tuple[float, ...]  # the model's kernel time for the same build
    rest_sec: tuple[float, ...]
    generic: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    bucket: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    above: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    static: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.values)
        sizes = {len(self.measured_sec), len(self.modelled_sec), len(self.rest_sec)}
        if not n or sizes != {n}:
            raise ValueError("calibration: one measured, modelled and rest time per value")
        if list(self.values) != sorted(set(self.values)):
            raise ValueError("calibration: values must be distinct and increasing")
        if min(self.measured_sec) <= 0 or min(self.modelled_sec) <= 0:
            raise ValueError("calibration: measured and modelled times must be positive")
        if min(self.rest_sec) < 0 or any(f <= 0 for f in self.factors()):
            raise ValueError("calibration: rest times and factors must be positive")

    def factors(self) -> list[float]:
        """Every measured / modelled factor it holds."""
        points = (*self.generic.values(), *self.bucket.values(), *self.above.values())
        return [*(f for pts in points for _, f in pts), *self.static.values()]

    def overhead(self, v: int) -> float:
        """The call's time outside the model's kernels at ``v``."""
        return _interpolate(v, list(zip(self.values, self.rest_sec, strict=True)))

    def generic_factor(self, kernel: str, v: int) -> float:
        points = self.generic.get(kernel)
        return _interpolate(v, list(points)) if points else 1.0

    def bucket_factor(self, kernel: str, v: int, above: bool) -> float:
        """A bucket kernel's factor at ``v`` (``above``: above the kernel's largest bucket;
        where none was timed there, the factors up to it)."""
        points = (self.above.get(kernel) if above else None) or self.bucket.get(kernel)
        return _interpolate(v, list(points)) if points else 1.0


def _interpolate(v: int, points: list[tuple[int, float]]) -> float:
    """Linear between the points (increasing x), held beyond them."""
    if v <= points[0][0]:
        return points[0][1]
    for (v0, y0), (v1, y1) in itertools.pairwise(points):
        if v <= v1:
            return y0 + (y1 - y0) * (v - v0) / (v1 - v0)
    return points[-1][1]
