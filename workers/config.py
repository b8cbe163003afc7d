"""Measurement and worker configuration, validated at construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are built and timed; stored with each job.

    ``number`` runs make one repeat (averaged), ``repeat`` repeats are reported,
    ``min_repeat_ms`` grows ``number`` for short kernels, ``cooldown_ms`` sleeps between
    candidates, ``cache_flush`` flushes the inputs but the first from the CPU caches before
    each repeat, and makes each repeat one run (``number`` and ``min_repeat_ms`` ignored).
    ``threads``: the thread count host kernels (CPU, ARM) are timed with; None:
    ``TVM_NUM_THREADS`` if the runner's environment sets it, else the node's CPUs (a job sets
    the target's ``num-cores``).

    ``screen``: a candidate whose single runs (the first ones :func:`workers.measure.timed_secs`
    makes) are all at least ``screen`` x its task's best so far is recorded from them; the
    repeats sized to ``min_repeat_ms`` are skipped (0: every candidate timed in full). A new
    best is never screened. ``screen_sec``: that threshold for one candidate, set by its runner
    per call from the candidate's :class:`Screen` (None: timed in full); a job's stored config
    has None.
    """

    # one run a repeat unless the kernel is shorter than min_repeat_ms, which then raises
    # number to cover it (sized once from the fastest of `repeat` single runs, TVM enforcing
    # half of it: workers.measure.timed_secs): a short kernel is timed for about repeat x
    # min_repeat_ms, and a slow one (an untuned default of 0.5 s) costs one run a repeat
    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 50
    cooldown_ms: int = 0
    cache_flush: bool = False
    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    threads: int | None = None
    # Measured on the 2-vCPU AMD EPYC (10 MLP jobs of 48 trials): 62% of the candidates after
    # a task's first ran at 2x its best so far or slower; each cost repeat x min_repeat_ms of
    # sized repeats to time precisely what its single runs had already shown slow.
    screen: float = 2.0
    screen_sec: float | None = None

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ValueError("MeasureConfig.threads must be >= 1")
        if self.screen != 0 and not self.screen >= 1:
            raise ValueError("MeasureConfig.screen must be 0 (off) or >= 1")
        if self.screen_sec is not None and not self.screen_sec > 0:
            raise ValueError("MeasureConfig.screen_sec must be > 0")
        for name in ("number", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"MeasureConfig.{name} must be >= 1")
        for name in ("min_repeat_ms", "cooldown_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"MeasureConfig.{name} must be >= 0")
        for name in ("build_timeout_s", "run_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MeasureConfig.{name} must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Screen:
    """What a runner screens one candidate by (:attr:`MeasureConfig.screen`): ``best_sec``,
    its task's best so far as the job knows it (None: none yet), and ``group``, its task, by
    which the runner also remembers the fastest candidate of it that it has timed itself (a
    round's candidates are timed one after another: the round's own new best screens the ones
    after it). The candidate's screen is ``screen`` x the lesser of the two."""

    best_sec: float | None = None
    group: str | None = None


@dataclass(frozen=True)
class FaultPolicy:
    """Bounds of the pool's recovery; validated at construction."""

    max_attempts: int = 2  # tries of one candidate (on dying, hanging, garbage workers)
    quarantine_after: int = 3  # consecutive failures of one slot
    startup_timeout_s: float = 120.0  # extra time for a fresh actor's first answer

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("FaultPolicy.max_attempts must be >= 1")
        if self.quarantine_after < 1:
            raise ValueError("FaultPolicy.quarantine_after must be >= 1")
        if self.startup_timeout_s < 0:
            raise ValueError("FaultPolicy.startup_timeout_s must be >= 0")
