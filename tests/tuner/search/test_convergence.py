"""The convergence estimate on synthetic histories, and the scheduler's use of it."""

from __future__ import annotations

import math

import pytest

from tuner.errors import TuneFarmError
from tuner.search.convergence import (
    ConvergenceConfig,
    TaskHistory,
    estimate,
    relative_error,
)
from tuner.search.scheduler import TaskProgress, next_task

CONFIG = ConvergenceConfig(gain=0.02, horizon=4.0, min_rounds=3, min_trials=0, z=2.0)
TRIALS = (8, 16, 24, 32, 40, 48, 56, 64)


def history(best: list[float], samples: tuple[float, ...] = ()) -> TaskHistory:
    return TaskHistory(TRIALS[: len(best)], tuple(best), samples)


def test_a_flat_curve_converges() -> None:
    """No gain since half the trials: nothing left to expect, converged."""
    est = estimate(history([2.0, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]), CONFIG)
    assert est.trend == 0.0 and est.noise == 0.0
    assert est.expected_gain == 0.0 and est.converged


def test_a_curve_still_dropping_does_not_converge() -> None:
    """10% gained from 32 to 64 trials: a power law with that slope gains 19% by 4x."""
    best = [2.0, 1.5, 1.3, 1.1, 1.07, 1.04, 1.02, 0.99]
    est = estimate(history(best), CONFIG)
    k = math.log(1.1 / 0.99) / math.log(2)
    assert est.trend == pytest.approx(1 - 4**-k)
    assert est.expected_gain == pytest.approx(0.19, abs=0.005)
    assert not est.converged


def test_noise_widens_the_estimate() -> None:
    """The same flat curve, its best timed with a spread: the gain expected grows by z
    standard errors, past the threshold."""
    flat = [2.0, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    quiet = estimate(history(flat, (1.0, 1.0, 1.0, 1.0)), CONFIG)
    noisy = estimate(history(flat, (0.9, 1.1, 0.9, 1.1)), CONFIG)
    assert noisy.noise == pytest.approx(relative_error((0.9, 1.1, 0.9, 1.1)))
    assert noisy.noise == pytest.approx(0.1155 / 2, abs=1e-3)  # stdev / mean / sqrt(4)
    assert noisy.expected_gain == pytest.approx(quiet.expected_gain + 2 * noisy.noise)
    assert quiet.converged and not noisy.converged


def test_too_few_rounds_or_nothing_valid_is_not_converged() -> None:
    """Two flat rounds are not enough evidence; without a valid best, or without a round at
    half the trials, everything may still be gained."""
    assert not estimate(history([1.0, 1.0]), CONFIG).converged
    assert estimate(history([1.0, 1.0, 1.0]), CONFIG).converged
    # 24 trials flat over their last 16: not yet 32 trials, not converged
    assert not estimate(history([1.0, 1.0, 1.0]), ConvergenceConfig(min_trials=32)).converged
    assert estimate(history([1.0, 1.0, 1.0, 1.0]), ConvergenceConfig(min_trials=32)).converged
    assert estimate(history([math.inf, math.inf, math.inf]), CONFIG).expected_gain == 1.0
    one_round = TaskHistory((64,), (1.0,))
    assert estimate(one_round, ConvergenceConfig(min_rounds=1)).expected_gain == 1.0
    assert estimate(TaskHistory((), ()), CONFIG).expected_gain == 1.0


def test_a_looser_gain_converges_a_curve_a_tighter_one_does_not() -> None:
    best = [2.0, 1.5, 1.3, 1.1, 1.07, 1.04, 1.02, 0.99]
    assert estimate(history(best), ConvergenceConfig(gain=0.25, min_trials=0)).converged
    assert not estimate(history(best), ConvergenceConfig(gain=0.1)).converged


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gain": 0},
        {"gain": 1.0},
        {"gain": math.nan},
        {"horizon": 1.0},
        {"min_rounds": 0},
        {"min_trials": -1},
        {"z": -1},
    ],
)
def test_bad_config_is_a_clear_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(TuneFarmError):
        ConvergenceConfig(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TuneFarmError, match="one best latency per round"):
        TaskHistory((8, 16), (1.0,))


def test_a_converged_task_gets_no_round_the_others_take_the_budget() -> None:
    """The scheduler sends a converged task no round even when it would rank first; its
    share (the job's budget, which every open task draws on) goes to the one still open."""
    high = TaskProgress(weight=10.0, want=100, baseline_sec=1.0, rounds=3, sent=24)
    low = TaskProgress(weight=1.0, want=100, baseline_sec=1.0, rounds=3, sent=24)
    for p in (high, low):
        for b in (0.5, 0.4, 0.3):
            p.measured(b, 8)
    assert next_task([high, low], {0, 1}) == 0
    high.converged = True
    assert not high.open and next_task([high, low], {0, 1}) == 1
    low.converged = True
    assert next_task([high, low], {0, 1}) is None


def test_a_round_in_the_history() -> None:
    """measured() keeps the trials after each round beside its best."""
    p = TaskProgress(weight=1.0, want=100)
    p.measured(None, 8)  # nothing valid yet
    p.measured(0.5, 6)
    p.samples = (0.5, 0.5)
    h = p.history()
    assert h.trials == (8, 14) and h.best == (math.inf, 0.5) and h.samples == (0.5, 0.5)
