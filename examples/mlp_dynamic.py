"""Dynamic-batch two-layer MLP: x[b, 256] -> Linear(256, 512) -> GELU -> Linear(512, 256).

The batch dim ``b`` is symbolic (upper bound 512); SHAPE_VARS gives the default tuning buckets.
Tune it with:  tunefarm tune examples/mlp_dynamic.py --trials 32
"""

import numpy as np
from scipy.special import erf
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS: dict[str, list[int]] = {"b": [1, 8, 32, 128]}


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("b", 256), "float32"),
        w1: R.Tensor((256, 512), "float32"),
        b1: R.Tensor((512,), "float32"),
        w2: R.Tensor((512, 256), "float32"),
        b2: R.Tensor((256,), "float32"),
    ) -> R.Tensor(("b", 256), "float32"):
        R.func_attr({"tir_var_upper_bound": {"b": 512}})
        with R.dataflow():
            h = R.add(R.matmul(x, w1), b1)
            h = R.nn.gelu(h)
            y = R.add(R.matmul(h, w2), b2)
            R.output(y)
        return y


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))).astype(np.float32)


def numpy_reference(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    """Plain-numpy float32 equivalent of ``Module["main"]`` (any batch size)."""
    h = _gelu(x @ w1 + b1)
    return (h @ w2 + b2).astype(np.float32)
