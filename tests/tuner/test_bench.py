"""``tunefarm bench``'s inputs: a parameter it cannot fill is one error naming it."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.bench.timing import random_inputs
from tuner.errors import TuneFarmError


@I.ir_module
class TupleParam:
    @R.function
    def main(pair: R.Tuple(R.Tensor((2,), "float32"), R.Tensor((2,), "float32"))):
        return pair[0]


def test_a_parameter_that_is_not_a_tensor_is_named() -> None:
    with pytest.raises(TuneFarmError, match="parameter pair is not a tensor"):
        random_inputs(TupleParam["main"], {}, np.random.default_rng(0))


def test_paired_ratios_hold_still_when_the_machine_slows_between_rounds() -> None:
    """A load that triples the time of everything every other round (a shared VM's slow
    phase): each round's two samples see the same load, so the paired ratio is exactly the
    runtimes' ratio with no spread, and which of the two is timed first alternates."""
    from tuner.bench.timing import time_paired

    calls: list[str] = []

    def load() -> float:  # the machine's slowdown in this round (2 samples per round)
        return 3.0 if (len(calls) // 2) % 2 else 1.0

    def timer(name: str, sec: float):
        def run() -> float:
            factor = load()
            calls.append(name)
            return sec * factor

        return run

    (ort,) = time_paired(timer("tuned", 1e-3), {"ort": timer("ort", 2e-3)}, repeat=4).values()
    assert (ort.ratio, ort.spread) == pytest.approx((2.0, 0.0))
    assert (ort.sec, ort.tuned_sec) == pytest.approx((4e-3, 2e-3))  # medians of 2, 6 and 1, 3
    assert calls == ["ort", "tuned", "tuned", "ort", "ort", "tuned", "tuned", "ort"]
    # a timer that returns nothing usable is left out, not divided by
    assert time_paired(lambda: 0.0, {"ort": timer("ort", 1e-3)}, repeat=2) == {}
