"""``tunefarm bench``'s inputs: a parameter it cannot fill is one error naming it."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.bench import random_inputs
from tuner.errors import TuneFarmError


@I.ir_module
class TupleParam:
    @R.function
    def main(pair: R.Tuple(R.Tensor((2,), "float32"), R.Tensor((2,), "float32"))):
        return pair[0]


def test_a_parameter_that_is_not_a_tensor_is_named() -> None:
    with pytest.raises(TuneFarmError, match="parameter pair is not a tensor"):
        random_inputs(TupleParam["main"], {}, np.random.default_rng(0))
