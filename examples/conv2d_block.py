"""Static conv block: x[1, 16, 32, 32] (NCHW) -> Conv2d(16->32, 3x3, pad 1) + bias -> ReLU.

All weights are parameters of ``main``. Tune it with:
    tunefarm tune examples/conv2d_block.py --trials 32
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor((1, 16, 32, 32), "float32"),
        w: R.Tensor((32, 16, 3, 3), "float32"),
        bias: R.Tensor((1, 32, 1, 1), "float32"),
    ) -> R.Tensor((1, 32, 32, 32), "float32"):
        with R.dataflow():
            y = R.nn.conv2d(x, w, strides=1, padding=1, data_layout="NCHW", kernel_layout="OIHW")
            y = R.add(y, bias)
            y = R.nn.relu(y)
            R.output(y)
        return y


def numpy_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Plain-numpy float32 equivalent of ``Module["main"]`` (stride 1, padding 1)."""
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, o, h, wd), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + h, j : j + wd]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return np.maximum(out + bias, 0.0).astype(np.float32)
