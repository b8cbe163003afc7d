"""The shared Relax pipeline: fast math on CPU targets (vectorizable tanh, erf, sigmoid and
small integer powers), exact ``exp`` for softmax, and the ``TUNEFARM_EXACT_MATH`` switch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tuner.compile import compile as tf_compile
from tuner.pipeline import EXACT_MATH_ENV, prepare


@I.ir_module
class Activations:
    @R.function
    def main(x: R.Tensor(("n", 16), "float32")) -> R.Tuple:
        with R.dataflow():
            cube = R.power(x, R.const(3.0, "float32"))
            inner = R.multiply(
                R.add(x, R.multiply(cube, R.const(0.044715, "float32"))),
                R.const(0.7978845608, "float32"),
            )
            gelu_new = R.multiply(
                R.multiply(x, R.const(0.5, "float32")),
                R.add(R.tanh(inner), R.const(1.0, "float32")),
            )
            gelu = R.multiply(
                x,
                R.add(
                    R.erf(R.multiply(x, R.const(0.70710678, "float32"))), R.const(1.0, "float32")
                ),
            )
            silu = R.multiply(x, R.sigmoid(x))
            square = R.power(x, R.const(2.0, "float32"))
            root = R.power(R.abs(x), R.const(0.5, "float32"))
            probs = R.nn.softmax(x, axis=0)
            out = (gelu_new, gelu, silu, square, root, probs)
            R.output(out)
        return out


def _reference(x: np.ndarray) -> list[np.ndarray]:
    erf = np.vectorize(math.erf)
    inner = (x + 0.044715 * x**3) * 0.7978845608
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return [
        0.5 * x * (1 + np.tanh(inner)),
        x * (erf(x * 0.70710678) + 1),
        x / (1 + np.exp(-x)),
        x * x,
        np.abs(x) ** 0.5,
        e / e.sum(axis=0, keepdims=True),
    ]


def _calls(mod: tvm.IRModule) -> str:
    return "\n".join(
        f.script() for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    )


def test_fast_math_leaves_no_scalar_library_calls(llvm_target) -> None:
    """tanh, erf, sigmoid and x**2, x**3 lower to arithmetic; softmax keeps its exact exp
    (its range kernels pad with -inf), and x**0.5 stays a power."""
    text = _calls(prepare(Activations, llvm_target))
    for gone in ("T.tanh(", "T.erf(", "T.sigmoid(", "T.pow(x"):
        assert gone not in text, gone
    assert "T.exp(" in text  # the softmax
    assert text.count("T.pow(") == 1  # x ** 0.5


def test_exact_math_switch_keeps_library_calls(llvm_target, monkeypatch) -> None:
    monkeypatch.setenv(EXACT_MATH_ENV, "1")
    text = _calls(prepare(Activations, llvm_target))
    for kept in ("T.tanh(", "T.pow("):
        assert kept in text, kept


@pytest.mark.parametrize("exact", ["0", "1"])
def test_fast_math_builds_match_numpy(llvm_target, monkeypatch, exact: str) -> None:
    """Both pipelines agree with numpy to float32 rounding at two lengths, over inputs that
    reach tanh's and the exponentials' saturated ranges."""
    monkeypatch.setenv(EXACT_MATH_ENV, exact)
    ex, _ = tf_compile(Activations, llvm_target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    for n in (5, 37):
        x = (rng.standard_normal((n, 16)) * 6).astype("float32")
        got = vm["main"](tvm.runtime.tensor(x))
        for i, want in enumerate(_reference(x.astype("float64"))):
            np.testing.assert_allclose(got[i].numpy(), want, rtol=2e-5, atol=2e-5, err_msg=str(i))
