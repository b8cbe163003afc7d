"""Two matmuls over ``s`` rows with a layer norm between them (``x[s, 64] @ w1``, normalized
over its 64 columns, ``@ w2``): three kernels that fusion keeps apart, each data-parallel
along ``s``, so a padded branch can run all three at one padded extent."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"s": [64]}


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("s", 64), "float32"),
        w1: R.Tensor((64, 64), "float32"),
        gamma: R.Tensor((64,), "float32"),
        beta: R.Tensor((64,), "float32"),
        w2: R.Tensor((64, 32), "float32"),
    ):
        with R.dataflow():
            h = R.matmul(x, w1)
            n = R.nn.layer_norm(h, gamma, beta, axes=[-1])
            y = R.matmul(n, w2)
            R.output(y)
        return y


def numpy_reference(
    x: np.ndarray, w1: np.ndarray, gamma: np.ndarray, beta: np.ndarray, w2: np.ndarray
) -> np.ndarray:
    h = x @ w1
    mean = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return ((h - mean) / np.sqrt(var + 1e-5) * gamma + beta) @ w2
