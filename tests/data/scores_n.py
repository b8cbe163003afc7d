"""Attention scores over a symbolic sequence (``q[n, 16] @ k[n, 16]^T``, output ``[n, n]``):
the kernel's busiest block has two loop axes over ``n`` (work grows as ``n**2``)."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"n": [16]}


@I.ir_module
class Module:
    @R.function
    def main(q: R.Tensor(("n", 16), "float32"), k: R.Tensor(("n", 16), "float32")):
        with R.dataflow():
            y = R.matmul(q, R.permute_dims(k))
            R.output(y)
        return y


def numpy_reference(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    return q @ k.T
