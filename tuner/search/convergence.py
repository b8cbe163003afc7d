"""When a task's search is done: an estimate of the gain still available from its history.

:func:`estimate` is a pure function of a task's :class:`TaskHistory` (its best latency after
each measured round, the trials it had by then, the timed runs of its best) and a
:class:`ConvergenceConfig`. The gain it expects is the sum of two parts, as a fraction of the
current best:

* **trend**: the best-so-far curve as a power law, ``best(t) = a * t**-k``, its exponent taken
  from the last half of the trials (the best at half the trials against the best now); the
  gain it predicts by ``horizon`` times the trials so far is ``1 - horizon**-k``. A curve that
  has not moved since half its trials has ``k = 0``; one still dropping keeps a large gain.
* **noise**: ``z`` standard errors of the best's mean, relative to it (a best timed with a
  wide spread may be luck, and an improvement smaller than that cannot be told from it).

A task is converged once it has had ``min_rounds`` rounds and ``min_trials`` trials and its
expected gain is below ``gain`` (a curve flat over a few candidates is no evidence: a dynamic
MLP's heaviest tasks, flat over their rounds 2-4 of 4 candidates each, stopped at 2.7x the
latency the same search reached with 96 trials). The tuning job's search
(:mod:`tuner.search.driver`) asks this after every round and, with ``tune --until-converged``,
sends a converged task no more rounds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tuner.errors import TuneFarmError

DEFAULT_GAIN = 0.02  # tune --until-converged's threshold: 2% of the current best


@dataclass(frozen=True)
class ConvergenceConfig:
    """What counts as converged; validated at construction."""

    gain: float = DEFAULT_GAIN  # converged below this expected gain (fraction of the best)
    horizon: float = 4.0  # the gain expected by this many times the trials so far
    min_rounds: int = 3  # rounds a task has before it may be converged
    min_trials: int = 32  # and trials
    z: float = 2.0  # standard errors of the best's mean added to the trend

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gain) and 0 < self.gain < 1):
            raise TuneFarmError(f"--gain must be between 0 and 1, exclusive (got {self.gain})")
        if not (math.isfinite(self.horizon) and self.horizon > 1):
            raise TuneFarmError(f"the horizon must be more than 1 (got {self.horizon})")
        if self.min_rounds < 1 or self.min_trials < 0:
            raise TuneFarmError(
                f"min_rounds must be at least 1 and min_trials 0 or more (got "
                f"{self.min_rounds}, {self.min_trials})"
            )
        if not (math.isfinite(self.z) and self.z >= 0):
            raise TuneFarmError(f"z must be 0 or more (got {self.z})")


@dataclass(frozen=True)
class TaskHistory:
    """A task's search so far: after each measured round, its trials (cumulative) and its best
    latency in seconds (``inf`` while nothing valid ran); ``samples``: its best's timed runs."""

    trials: tuple[int, ...]
    best: tuple[float, ...]
    samples: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.trials) != len(self.best):
            raise TuneFarmError("a task history needs one best latency per round's trials")


@dataclass(frozen=True)
class Estimate:
    """The gain still available to a task, as fractions of its current best."""

    expected_gain: float  # trend + noise, at most 1
    trend: float  # what the best-so-far curve predicts by the horizon
    noise: float  # the best's relative standard error (before z)
    converged: bool


def estimate(history: TaskHistory, config: ConvergenceConfig) -> Estimate:
    """The gain ``history``'s task may still find by ``config.horizon`` times its trials."""
    noise = relative_error(history.samples)
    trend = _trend(history, config.horizon)
    gain = min(1.0, trend + config.z * noise)
    trials = history.trials[-1] if history.trials else 0
    enough = len(history.best) >= config.min_rounds and trials >= config.min_trials
    return Estimate(gain, trend, noise, enough and gain < config.gain)


def relative_error(samples: tuple[float, ...]) -> float:
    """The standard error of the samples' mean over the mean (0 with fewer than 2 samples)."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    if not (mean > 0 and math.isfinite(mean)):
        return 0.0
    return statistics.stdev(samples) / mean / math.sqrt(len(samples))


def _trend(history: TaskHistory, horizon: float) -> float:
    """``1 - horizon**-k`` of the power law through the best at half the trials and now; 1
    (all of it, unknown) without a valid best or a round at most half the trials in."""
    if not history.best or not math.isfinite(history.best[-1]) or history.best[-1] <= 0:
        return 1.0
    now_trials, now_best = history.trials[-1], history.best[-1]
    then = [
        (t, b)
        for t, b in zip(history.trials, history.best, strict=True)
        if 0 < t <= now_trials / 2 and math.isfinite(b)
    ]
    if not then:
        return 1.0
    then_trials, then_best = then[-1]
    k = math.log(then_best / now_best) / math.log(now_trials / then_trials)
    return max(0.0, 1.0 - horizon ** (-k))


__all__ = [
    "DEFAULT_GAIN",
    "ConvergenceConfig",
    "Estimate",
    "TaskHistory",
    "estimate",
    "relative_error",
]
