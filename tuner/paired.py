"""Paired comparisons with confidence: is A faster than B, and by how much, from pairs of
measurements taken side by side (two kernels timed interleaved, two tuners run back to back).

Every comparison works on the paired log-ratios ``log(a / b)``: machine drift that hits both
sides of a pair cancels, and ratios compose (a 0.8x pair and a 1.25x pair average to 1x). The
statistic is their mean (the log of the geometric-mean ratio); its uncertainty is a percentile
bootstrap interval, deterministic for a given ``seed``, its deviations scaled by
``sqrt(n / (n - 1))`` so that a handful of pairs do not look tighter than they are.

- :func:`interval`: the bootstrap interval of the mean log-ratio, as ratios;
- :func:`judge`: a target ratio's verdict (``met``, ``missed`` or ``undecided`` with the
  number of pairs it would take, from the observed spread);
- :func:`faster_with_confidence`: whether a challenger beats an incumbent (a tie never does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

LEVEL = 0.9  # the interval's coverage: 5% on each side
RESAMPLES = 10_000
MIN_PAIRS = 3  # fewer pairs are never decided, however narrow their interval looks
MAX_NEEDED = 1000  # a pairs estimate above this says "more than"
Verdict = Literal["met", "missed", "undecided"]


def log_ratios(pairs: Sequence[tuple[float, float]]) -> list[float]:
    """``log(a / b)`` of each pair ``(a, b)``; a pair with a side not above 0 is an error."""
    out = []
    for a, b in pairs:
        if not (a > 0 and b > 0):
            raise ValueError(f"a paired ratio needs two positive values, got ({a}, {b})")
        out.append(math.log(a / b))
    return out


@dataclass(frozen=True)
class Interval:
    """The mean paired log-ratio with its bootstrap interval, as ratios (``exp``)."""

    pairs: int
    ratio: float  # the geometric mean of the pairs' ratios
    low: float
    high: float
    spread: float  # the log-ratios' sample standard deviation (0 for one pair)
    level: float = LEVEL

    def __post_init__(self) -> None:
        if self.pairs < 1:
            raise ValueError("an interval needs at least one pair")
        if not (0 < self.level < 1):
            raise ValueError(f"level must be within (0, 1), got {self.level}")


def interval(
    logs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """The bootstrap ``level`` interval of the mean of ``logs`` (paired log-ratios)."""
    import numpy as np

    x = np.asarray(logs, dtype=float)
    n = x.size
    if n == 0:
        raise ValueError("an interval needs at least one pair")
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    if n == 1:
        return Interval(1, math.exp(mean), math.exp(mean), math.exp(mean), 0.0, level)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    means = mean + (means - mean) * math.sqrt(n / (n - 1))  # the plug-in spread's bias
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return Interval(n, math.exp(mean), math.exp(float(lo)), math.exp(float(hi)), sd, level)


def pairs_needed(iv: Interval, target: float) -> int | None:
    """How many pairs would put an interval like ``iv`` (same mean, same spread) entirely on
    one side of ``target``: ``(z * spread / distance)^2`` with the normal quantile of the
    level; at least one more than ``iv`` has. None when the mean sits on the target or the
    pairs have no spread to judge from (one pair)."""
    from statistics import NormalDist

    distance = abs(math.log(iv.ratio) - math.log(target))
    if distance == 0 or iv.pairs < 2:
        return None
    z = NormalDist().inv_cdf(1 - (1 - iv.level) / 2)
    return max(iv.pairs + 1, math.ceil((z * iv.spread / distance) ** 2))


@dataclass(frozen=True)
class Judgement:
    """A target ``ratio <= target`` judged on paired evidence."""

    target: float
    interval: Interval
    verdict: Verdict
    needed: int | None = None  # undecided: the pairs it would take (None: cannot say)

    def describe(self) -> str:
        """``met``, ``missed``, or ``undecided (~N pairs)``."""
        if self.verdict != "undecided":
            return self.verdict
        if self.needed is None:
            return "undecided (more pairs: spread unknown)"
        if self.needed > MAX_NEEDED:
            return f"undecided (> {MAX_NEEDED} pairs)"
        return f"undecided (~{self.needed} pairs)"


def judge(logs: Sequence[float], target: float, level: float = LEVEL, seed: int = 0) -> Judgement:
    """The verdict on ``ratio <= target`` from paired log-ratios: ``met`` when the whole
    interval is at or below the target, ``missed`` when it is all above, else ``undecided``
    with :func:`pairs_needed`. Fewer than :data:`MIN_PAIRS` pairs are always undecided."""
    if not target > 0:
        raise ValueError(f"a target ratio must be positive, got {target}")
    iv = interval(logs, level, seed=seed)
    if iv.pairs >= MIN_PAIRS and iv.high <= target:
        return Judgement(target, iv, "met")
    if iv.pairs >= MIN_PAIRS and iv.low > target:
        return Judgement(target, iv, "missed")
    needed = pairs_needed(iv, target)
    if needed is not None:
        needed = max(needed, MIN_PAIRS)
    return Judgement(target, iv, "undecided", needed)


def faster_with_confidence(
    challenger: Sequence[float],
    incumbent: Sequence[float],
    margin: float = 0.0,
    level: float = LEVEL,
    seed: int = 0,
) -> bool:
    """Whether ``challenger`` is faster than ``incumbent`` by more than ``margin`` (a share:
    0.02 = 2%) with confidence, from times measured in pairs (interleaved, ``challenger[i]``
    beside ``incumbent[i]``): the :func:`judge` verdict on ``challenger / incumbent <= 1 -
    margin`` is ``met``. A challenger that only ties is never faster."""
    if len(challenger) != len(incumbent):
        raise ValueError(
            f"paired times need as many of each: {len(challenger)} vs {len(incumbent)}"
        )
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be within [0, 1), got {margin}")
    logs = log_ratios(list(zip(challenger, incumbent, strict=True)))
    # a strict improvement: an interval touching 1 is a tie
    target = (1 - margin) * (1 - 1e-12)
    return judge(logs, target, level, seed).verdict == "met"
