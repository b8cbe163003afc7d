"""Symbolic-shape kernels of every kind the dispatch must get right, over one variable ``n``.

- a fused matmul + bias + relu whose rows are ``n`` (padded and dispatched per bucket);
- softmax over the symbolic axis (a reduction over ``n``: padded with -inf);
- attention scores ``q @ k^T`` of shape ``n x n`` (``n`` in two axes);
- a mean over ``n`` (divides by ``n`` itself: no padding serves, the generic kernel does).
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R

SHAPE_VARS = {"n": [4, 16]}


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("n", 64), "float32"),
        w: R.Tensor((64, 32), "float32"),
        bias: R.Tensor((32,), "float32"),
        k: R.Tensor(("n", 32), "float32"),
    ):
        with R.dataflow():
            h = R.nn.relu(R.add(R.matmul(x, w), bias))
            p = R.nn.softmax(h, axis=0)
            scores = R.matmul(h, R.permute_dims(k, [1, 0]))
            mean = R.mean(h, axis=0)
            out = (p, scores, mean)
            R.output(out)
        return out


def numpy_reference(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray, k: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = np.maximum(x @ w + bias, 0.0)
    e = np.exp(h - h.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True), h @ k.T, h.mean(axis=0)
