"""A matmul + bias + relu over a symbolic row count ``n``: the cost-model benchmark's model.

Each bucket of ``n`` is its own static workload of one family, so a database filled at some
buckets teaches the cost model about the others.
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"n": [8, 32, 128]}


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("n", 128), "float32"),
        w: R.Tensor((128, 128), "float32"),
        bias: R.Tensor((128,), "float32"),
    ):
        with R.dataflow():
            y = R.nn.relu(R.add(R.matmul(x, w), bias))
            R.output(y)
        return y


def numpy_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w + bias, 0.0)
