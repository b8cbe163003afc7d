"""Which task searches next: every task once, then the one whose rounds pay most."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tuner.search.convergence import Estimate, TaskHistory

# rounds in a row that brought only candidates measured before, after which a task's search
# counts as exhausted (its share's refunds would otherwise ask it for rounds for ever)
MAX_STALE_ROUNDS = 3


@dataclass
class TaskProgress:
    """What the scheduler knows of one task."""

    weight: float
    want: int  # candidates this task may still be sent (its share of the budget, or the job's)
    baseline_sec: float | None = None
    rounds: int = 0
    sent: int = 0
    best: list[float] = field(default_factory=list)  # best latency after each measured round
    exhausted: bool = False  # its search has nothing more to offer
    stale: int = 0  # rounds in a row of candidates all measured before (no new record)
    tried: list[int] = field(default_factory=list)  # its new trials after each measured round
    samples: tuple[float, ...] = ()  # the timed runs of its best found by this search
    estimate: Estimate | None = None  # the gain still available (tuner.search.convergence)
    converged: bool = False  # its expected gain fell below the job's --gain: no more rounds
    converged_at: int | None = None  # its new trials (``tried``) when it converged

    @property
    def open(self) -> bool:
        return not self.exhausted and not self.converged and self.sent < self.want

    def measured(self, best_sec: float | None, new_trials: int = 0) -> None:
        """A round of this task was measured; ``best_sec``: its best latency so far;
        ``new_trials``: the round's candidates that were new records."""
        last = self.best[-1] if self.best else self.baseline_sec
        value = best_sec if best_sec is not None else last
        self.best.append(value if value is not None else math.inf)
        self.tried.append((self.tried[-1] if self.tried else 0) + new_trials)

    def history(self) -> TaskHistory:
        """What :func:`tuner.search.convergence.estimate` judges."""
        return TaskHistory(tuple(self.tried), tuple(self.best), self.samples)

    def refund(self, hits: int, sent: int) -> None:
        """``hits`` of a round's ``sent`` candidates were measured before (no new record, no
        trial of the budget): they give their place in the task's share back. After
        :data:`MAX_STALE_ROUNDS` rounds in a row of nothing new, the task is exhausted."""
        if hits <= 0:
            self.stale = 0
            return
        self.sent = max(0, self.sent - hits)
        self.stale = self.stale + 1 if hits >= sent else 0
        if self.stale >= MAX_STALE_ROUNDS:
            self.exhausted = True

    def untuned_cost(self) -> float:
        """The task's weighted latency before any round (infinite when not measured)."""
        base = self.baseline_sec
        return self.weight * base if base is not None and math.isfinite(base) else math.inf

    def priority(self) -> float:
        """Expected weighted gain of one more round: the task's weighted latency, raised by
        how much its last round gained, lowered by the rounds it already had (each round
        finds less). Larger is better."""
        latest = next((b for b in reversed(self.best) if math.isfinite(b)), None)
        latest = latest if latest is not None else self.baseline_sec
        if latest is None:
            return math.inf  # nothing valid yet: worth a round before anything known
        before = self.best[-2] if len(self.best) > 1 else self.baseline_sec
        gain = (before - latest) / before if before and math.isfinite(before) else 0.0
        return self.weight * latest * (1.0 + max(0.0, gain)) / (1 + self.rounds)


def next_task(progress: list[TaskProgress], eligible: set[int]) -> int | None:
    """The task of ``eligible`` to search next: one that was sent no round yet first, the
    largest weighted untuned latency first (a model's latency is its slowest kernels' until
    they have a round; unknown counts as largest, ties in order), then the highest
    :meth:`TaskProgress.priority`; None when none is open.

    A round counts from when its candidates are sent, not measured: the driver asks for the
    next round while the last one builds, and a task whose first round is in the builders
    must not be asked for a second before every other task had its first (a warm job's
    second task's siblings waited behind the first task's whole searched round)."""
    open_ids = [i for i in sorted(eligible) if progress[i].open]
    if not open_ids:
        return None
    fresh = [i for i in open_ids if progress[i].rounds == 0 and progress[i].sent == 0]
    if fresh:
        return max(fresh, key=lambda i: (progress[i].untuned_cost(), -i))
    return max(open_ids, key=lambda i: (progress[i].priority(), -progress[i].sent))
