"""Build an ONNX MLP with a symbolic batch with ``onnx.helper``.

y[batch, 32] = Relu(x[batch, 64] @ W1[64, 256] + b1) @ W2[256, 32] + b2; the batch dim's
``dim_param`` is ``batch``, which TuneFarm keeps as the symbolic dim's name::

    python examples/make_onnx_mlp.py          # writes examples/mlp_batch.onnx
    tunefarm tune examples/mlp_batch.onnx --shape batch=1,16,64 --trials 32
    tunefarm bench examples/mlp_batch.onnx --shape batch=1,5,16,40,64,129
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IN, HIDDEN, OUT = 64, 256, 32


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        scale = 1.0 / np.sqrt(shape[0])
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["h_b"]),
        helper.make_node("Relu", ["h_b"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        [
            weight("w1", IN, HIDDEN),
            weight("b1", HIDDEN),
            weight("w2", HIDDEN, OUT),
            weight("b2", OUT),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(path: Path) -> None:
    onnx.save(build(), str(path))
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "mlp_batch.onnx")
