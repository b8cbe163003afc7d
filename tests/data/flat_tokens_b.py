"""A ViT-style flattened token matmul: ``x[b, 5, 16]`` reshaped to ``[b * 5, 16]`` times
``W[16, 8]``. The kernel's rows are ``5 * b`` (not ``b`` itself), so its bucket kernels pad
that dim to ``5 * B``."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

SHAPE_VARS = {"b": [4]}


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("b", 5, 16), "float32"), w: R.Tensor((16, 8), "float32")):
        b = T.int64()
        with R.dataflow():
            flat = R.reshape(x, R.shape([b * 5, 16]))
            y = R.matmul(flat, w)
            R.output(y)
        return y


def numpy_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.reshape(-1, 16) @ w
