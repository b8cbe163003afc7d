"""Paired comparisons (:mod:`tuner.paired`) on synthetic paired sets with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.paired import (
    MIN_PAIRS,
    faster_with_confidence,
    interval,
    judge,
    log_ratios,
    pairs_needed,
)


def _logs(ratio: float, spread: float, n: int, seed: int = 1) -> list[float]:
    """``n`` log-ratios with exactly the mean ``log(ratio)`` and the sample sd ``spread``."""
    x = np.random.default_rng(seed).standard_normal(n)
    x = (x - x.mean()) / x.std(ddof=1)
    return list(math.log(ratio) + spread * x)


def test_a_clearly_met_set_is_met_and_a_clearly_missed_one_missed() -> None:
    met = judge(_logs(0.5, 0.1, 10), target=0.7)
    assert met.verdict == "met" and met.describe() == "met"
    assert met.interval.ratio == pytest.approx(0.5)
    assert met.interval.low < 0.5 < met.interval.high <= 0.7
    missed = judge(_logs(1.0, 0.1, 10), target=0.7)
    assert missed.verdict == "missed" and missed.interval.low > 0.7


def test_a_noisy_set_is_undecided_with_the_pairs_it_would_take() -> None:
    logs = _logs(0.6, 0.5, 5)
    j = judge(logs, target=0.7)
    assert j.verdict == "undecided"
    assert j.interval.low < 0.7 < j.interval.high
    # (1.645 x 0.5 / log(0.7 / 0.6))^2 = 28.4
    assert j.needed == 29 and j.describe() == "undecided (~29 pairs)"
    # as many pairs with the same mean and spread decide it
    assert judge(_logs(0.6, 0.5, 40), target=0.7).verdict == "met"


def test_a_set_on_its_target_or_of_too_few_pairs_is_never_decided() -> None:
    tight = judge(_logs(0.5, 0.01, MIN_PAIRS - 1), target=0.7)
    assert tight.verdict == "undecided" and tight.needed == MIN_PAIRS
    one = judge([math.log(0.5)], target=0.7)
    assert one.verdict == "undecided" and one.needed is None
    assert "spread unknown" in one.describe()
    on_target = judge(_logs(0.7, 0.2, 8), target=0.7)
    assert on_target.verdict == "undecided" and pairs_needed(on_target.interval, 0.7) is None


def test_the_interval_is_deterministic_and_widens_with_the_spread() -> None:
    logs = _logs(0.8, 0.3, 6)
    assert interval(logs) == interval(logs)
    assert interval(logs, seed=1) != interval(logs, seed=2)
    narrow, wide = interval(_logs(0.8, 0.1, 6)), interval(_logs(0.8, 0.4, 6))
    assert wide.high / wide.low > narrow.high / narrow.low > 1
    with pytest.raises(ValueError, match="at least one pair"):
        interval([])


def test_ratios_need_positive_sides() -> None:
    assert log_ratios([(2.0, 1.0)]) == [pytest.approx(math.log(2))]
    with pytest.raises(ValueError, match="two positive values"):
        log_ratios([(0.0, 1.0)])
    with pytest.raises(ValueError, match="target ratio must be positive"):
        judge([0.0, 0.1, 0.2], 0)


def test_a_challenger_that_only_ties_is_not_faster() -> None:
    rng = np.random.default_rng(3)
    incumbent = list(1e-3 * (1 + 0.05 * rng.standard_normal(12)))
    tie = [t * (1 + 0.05 * e) for t, e in zip(incumbent, rng.standard_normal(12), strict=True)]
    assert not faster_with_confidence(tie, incumbent)
    assert not faster_with_confidence(incumbent, incumbent)  # identical: no spread, no gain
    faster = [0.8 * t for t in tie]
    assert faster_with_confidence(faster, incumbent)
    assert not faster_with_confidence(faster, incumbent, margin=0.3)  # not by 30%
    with pytest.raises(ValueError, match="as many of each"):
        faster_with_confidence(faster[:3], incumbent)
