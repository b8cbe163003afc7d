"""Dynamic-length transformer encoder block: x[s, 128] (hidden 128, 4 heads of 32).

The sequence length ``s`` is symbolic (upper bound 256); SHAPE_VARS gives the default tuning
buckets. Tune it with:  tunefarm tune examples/transformer_block_dynamic.py --trials 32
"""

import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

SHAPE_VARS: dict[str, list[int]] = {"s": [16, 64, 128]}

HIDDEN = 128
HEADS = 4
HEAD_DIM = 32


@I.ir_module
class Module:
    @R.function
    def main(
        x: R.Tensor(("s", 128), "float32"),
        wq: R.Tensor((128, 128), "float32"),
        bq: R.Tensor((128,), "float32"),
        wk: R.Tensor((128, 128), "float32"),
        bk: R.Tensor((128,), "float32"),
        wv: R.Tensor((128, 128), "float32"),
        bv: R.Tensor((128,), "float32"),
        wo: R.Tensor((128, 128), "float32"),
        bo: R.Tensor((128,), "float32"),
        gamma: R.Tensor((128,), "float32"),
        beta: R.Tensor((128,), "float32"),
    ) -> R.Tensor(("s", 128), "float32"):
        s = T.int64()
        R.func_attr({"tir_var_upper_bound": {"s": 256}})
        with R.dataflow():
            q = R.add(R.matmul(x, wq), bq)
            k = R.add(R.matmul(x, wk), bk)
            v = R.add(R.matmul(x, wv), bv)
            q = R.permute_dims(R.reshape(q, (s, 4, 32)), axes=[1, 0, 2])  # [4, s, 32]
            k_t = R.permute_dims(R.reshape(k, (s, 4, 32)), axes=[1, 2, 0])  # [4, 32, s]
            v = R.permute_dims(R.reshape(v, (s, 4, 32)), axes=[1, 0, 2])  # [4, s, 32]
            scores = R.divide(R.matmul(q, k_t), R.const(5.656854249492381, "float32"))
            probs = R.nn.softmax(scores, axis=-1)
            ctx = R.matmul(probs, v)  # [4, s, 32]
            ctx = R.reshape(R.permute_dims(ctx, axes=[1, 0, 2]), (s, 128))
            out = R.add(R.matmul(ctx, wo), bo)
            out = R.add(out, x)
            y = R.nn.layer_norm(out, gamma, beta, axes=[-1], epsilon=1e-5)
            R.output(y)
        return y


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


def numpy_reference(
    x: np.ndarray,
    wq: np.ndarray,
    bq: np.ndarray,
    wk: np.ndarray,
    bk: np.ndarray,
    wv: np.ndarray,
    bv: np.ndarray,
    wo: np.ndarray,
    bo: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
) -> np.ndarray:
    """Plain-numpy float32 equivalent of ``Module["main"]`` (works for any sequence length)."""
    seq = x.shape[0]
    q = (x @ wq + bq).reshape(seq, HEADS, HEAD_DIM).transpose(1, 0, 2)
    k = (x @ wk + bk).reshape(seq, HEADS, HEAD_DIM).transpose(1, 0, 2)
    v = (x @ wv + bv).reshape(seq, HEADS, HEAD_DIM).transpose(1, 0, 2)
    probs = _softmax(q @ k.transpose(0, 2, 1) / np.sqrt(HEAD_DIM))
    ctx = (probs @ v).transpose(1, 0, 2).reshape(seq, HIDDEN)
    out = ctx @ wo + bo + x
    return _layer_norm(out, gamma, beta).astype(np.float32)
