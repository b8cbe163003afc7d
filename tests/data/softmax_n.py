"""Softmax over a symbolic axis (``x[n, 32]``, normalized over ``n``): the kernel reduces over
``n`` with a max and a sum of ``exp``, so its range kernels need -inf padding."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"n": [16]}


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 32), "float32")):
        with R.dataflow():
            y = R.nn.softmax(x, axis=0)
            R.output(y)
        return y


def numpy_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
