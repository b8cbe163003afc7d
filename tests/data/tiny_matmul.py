"""A tiny static matmul + relu, for fast real tuning in tests."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((32, 64), "float32"), w: R.Tensor((64, 32), "float32")) -> R.Tensor(
        (32, 32), "float32"
    ):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def numpy_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w, 0.0)
