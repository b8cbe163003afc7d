"""How candidates are timed: repeats of about ``min_repeat_ms`` each, sized once.

The kernel counts its own calls (``c[0] += 1``), so every figure here is what TVM's
evaluator really ran."""

from __future__ import annotations

import functools
import statistics

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from workers.config import MeasureConfig
from workers.measure import SINGLE_RUN_SLACK_SEC, timed_secs


def _counting_kernel(n: int) -> tvm.runtime.Module:
    @T.prim_func
    def main(
        c: T.Buffer((1,), "int64"), x: T.Buffer((n,), "float32"), y: T.Buffer((1,), "float32")
    ):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        c[0] = c[0] + T.int64(1)
        y[0] = T.float32(0)
        for i in range(n):
            y[0] = y[0] + x[i]

    return tvm.tirx.build(tvm.IRModule({"main": main}), target=tvm.target.Target({"kind": "llvm"}))


def _timed(n: int, config: MeasureConfig) -> tuple[tuple[float, ...], int]:
    secs, calls, _ = _timed_screened(n, config)
    return secs, calls


def _timed_screened(n: int, config: MeasureConfig) -> tuple[tuple[float, ...], int, bool]:
    lib = _counting_kernel(n)
    dev = tvm.cpu()
    args = [
        tvm.runtime.tensor(np.zeros(1, "int64"), dev),
        tvm.runtime.tensor(np.ones(n, "float32"), dev),
        tvm.runtime.tensor(np.zeros(1, "float32"), dev),
    ]
    # the runner's evaluator: with cache_flush, the inputs but the first flushed before a repeat
    preproc = "cache_flush_cpu_non_first_arg" if config.cache_flush else ""
    evaluator = functools.partial(lib.time_evaluator, "main", dev, f_preproc=preproc)
    secs, screened = timed_secs(evaluator, args, config)
    return tuple(float(s) for s in secs), int(args[0].numpy()[0]), screened


def test_short_kernel_repeats_are_sized_once_to_the_minimum() -> None:
    min_sec = 0.02
    secs, calls = _timed(1024, MeasureConfig(number=1, repeat=3, min_repeat_ms=20))
    assert len(secs) == 3 and all(s > 0 for s in secs)
    # a warm-up and a single run, a warm-up and 2 more, then a warm-up and 3 repeats of many
    runs = calls - 6
    assert runs >= 3 * 100 and runs % 3 == 0  # one size for the 3 repeats
    # the repeats' time, counted in the kernel's runs: about the minimum, but the single run
    # that sized them and the repeats may meet different loads on a busy machine, so only
    # the order of magnitude is asserted
    spent = runs * statistics.mean(secs)
    assert 0.1 * 3 * min_sec <= spent <= 10 * 3 * min_sec


def _one_run_ms(n: int) -> float:
    """The fastest of three single runs (one run alone may be slowed by the machine's noise,
    and the tests below size their minimums from it: one CI run failed so)."""
    secs, _ = _timed(n, MeasureConfig(number=1, repeat=3, min_repeat_ms=0))
    return min(secs) * 1000


def test_kernel_slower_than_the_minimum_is_timed_once_per_repeat() -> None:
    n = 1 << 23
    # one run: about 2 minimums, under 6 of them (a run 3x slower than the fastest is
    # still timed as a repeat, a run 2x faster is still over the minimum)
    min_ms = max(1, int(_one_run_ms(n) / 2))
    secs, calls = _timed(n, MeasureConfig(number=1, repeat=6, min_repeat_ms=min_ms))
    assert len(secs) == 6 and min(secs) > min_ms / 1000
    assert calls == 1 + 1 + 1 + 5  # a warm-up and a run, a warm-up and the 5 other repeats


def test_kernel_slower_than_all_the_repeats_together_is_timed_by_one_run() -> None:
    n = 1 << 23
    min_ms = max(1, int(_one_run_ms(n) / 8))  # one run: about 8 minimums, over 3 of them
    secs, calls = _timed(n, MeasureConfig(number=1, repeat=3, min_repeat_ms=min_ms))
    assert len(secs) == 1 and secs[0] > 3 * min_ms / 1000
    assert calls == 2  # TVM's warm-up and the one run


def test_without_a_minimum_number_and_repeat_are_taken_as_given() -> None:
    secs, calls = _timed(64, MeasureConfig(number=4, repeat=2, min_repeat_ms=0))
    assert len(secs) == 2 and calls == 1 + 4 * 2


def test_with_cache_flush_every_repeat_is_one_cold_run() -> None:
    """Flushed before each repeat, a run sized to a minimum would be cold once and warm after:
    ``number`` and ``min_repeat_ms`` give way to one run a repeat."""
    config = MeasureConfig(number=8, repeat=4, min_repeat_ms=20, cache_flush=True)
    secs, calls = _timed(1024, config)
    assert len(secs) == 4 and all(s > 0 for s in secs)
    assert calls == 1 + 4  # TVM's warm-up and the 4 repeats of one run


@pytest.mark.parametrize("number", [1, 50])
def test_a_larger_configured_number_is_a_floor(number: int) -> None:
    secs, calls = _timed(64, MeasureConfig(number=number, repeat=2, min_repeat_ms=4))
    assert len(secs) == 2
    # a warm-up and a run, a warm-up and a run, a warm-up and 2 repeats
    assert calls - 5 >= 2 * max(number, 2)


def test_a_kernel_slower_than_its_screen_is_timed_by_its_single_runs() -> None:
    # the single runs (tens of us each) are far above a 1 ns screen: no sized repeats
    config = MeasureConfig(number=1, repeat=3, min_repeat_ms=20, screen_sec=1e-9)
    secs, calls, screened = _timed_screened(1 << 18, config)
    assert screened and len(secs) == 3 and all(s > SINGLE_RUN_SLACK_SEC for s in secs)
    assert calls == 1 + 1 + 1 + 2  # a warm-up and a run, a warm-up and 2 more: nothing else


def test_a_kernel_of_about_a_calls_overhead_is_never_screened() -> None:
    # single runs of about 1 us: within a call's overhead of any screen, so timed in full
    config = MeasureConfig(number=1, repeat=3, min_repeat_ms=20, screen_sec=1e-9)
    _, calls, screened = _timed_screened(1024, config)
    assert not screened and calls - 6 >= 3 * 100


def test_a_kernel_under_its_screen_is_timed_in_full() -> None:
    # a screen of 1 s: a candidate this fast could be a new best, so its repeats are sized
    config = MeasureConfig(number=1, repeat=3, min_repeat_ms=20, screen_sec=1.0)
    secs, calls, screened = _timed_screened(1024, config)
    assert not screened and len(secs) == 3
    assert calls - 6 >= 3 * 100  # as test_short_kernel_repeats_are_sized_once_to_the_minimum


@pytest.mark.parametrize("screen", [0.5, -1.0])
def test_a_screen_below_one_is_refused(screen: float) -> None:
    # below 1x the best, a screen would skip the sized repeats of a candidate that may beat it
    with pytest.raises(ValueError, match="screen"):
        MeasureConfig(screen=screen)
