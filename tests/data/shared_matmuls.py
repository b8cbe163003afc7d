"""Three symbolic matmuls that are one static kernel at s=64: ``x @ x^T`` ([s, 64] x [64, s]),
its product with ``x`` ([s, s] x [s, 64]) and that by ``w`` ([s, 64] x [64, 64]). The
specialized module has one ``matmul`` where the symbolic one has ``matmul``, ``matmul1`` and
``matmul2``: kernel names cannot link a bucket's records to the kernels they serve."""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"s": [64]}


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("s", 64), "float32"), w: R.Tensor((64, 64), "float32")):
        with R.dataflow():
            a = R.matmul(x, R.permute_dims(x))
            b = R.matmul(a, x)
            c = R.matmul(b, w)
            R.output(c)
        return c


def numpy_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (x @ x.T) @ x @ w
