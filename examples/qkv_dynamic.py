"""BERT-base QKV projection with a dynamic token count: X[M, 768] · W[768, 2304].

``M`` (tokens in the batch) is symbolic, up to 1024; the benchmark suite tunes it at a few
buckets and sweeps M on and off them. Tune it with:
``tunefarm tune examples/qkv_dynamic.py --shape M=8,128 --trials 32``
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS: dict[str, list[int]] = {"M": [8, 128]}


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("M", 768), "float32"), w: R.Tensor((768, 2304), "float32")) -> R.Tensor(
        ("M", 2304), "float32"
    ):
        R.func_attr({"tir_var_upper_bound": {"M": 1024}})
        with R.dataflow():
            y = R.matmul(x, w)
            R.output(y)
        return y


def numpy_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """numpy/OpenBLAS float32 equivalent of ``Module["main"]``."""
    return x @ w
