"""The fixed CPU schedule of kernels over several symbolic variables
(:mod:`tuner.symbolic.fixed`): real kernels built and run at many values of both variables,
their outputs equal to the untuned kernel's; the decoder's build uses it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from tuner.symbolic.fixed import reduction_outer

VALUES = [(1, 1), (1, 37), (5, 3), (16, 64), (3, 200)]


def _two_vars() -> tuple[tirx.Var, tirx.Var]:
    return tirx.Var("n", "int64"), tirx.Var("m", "int64")


def _pv() -> tirx.PrimFunc:
    """``probs @ V`` over both: probs ``[n, m]``, V ``[m, 16]`` (a sum over ``m``)."""
    n, m = _two_vars()
    p = te.placeholder((n, m), name="P")
    v = te.placeholder((m, 16), name="V")
    k = te.reduce_axis((0, m), name="k")
    out = te.compute((n, 16), lambda i, j: te.sum(p[i, k] * v[k, j], axis=k), name="O")
    return te.create_prim_func([p, v, out])


def _scores() -> tirx.PrimFunc:
    """``q @ k^T``: a static reduction of 16 innermost, ``m`` spatial."""
    n, m = _two_vars()
    q = te.placeholder((n, 16), name="Q")
    kt = te.placeholder((16, m), name="K")
    r = te.reduce_axis((0, 16), name="r")
    out = te.compute((n, m), lambda i, j: te.sum(q[i, r] * kt[r, j], axis=r), name="S")
    return te.create_prim_func([q, kt, out])


def _run(func: tirx.PrimFunc, n: int, m: int, target: tvm.target.Target) -> np.ndarray:
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    rng = np.random.default_rng(n * 1000 + m)
    p = rng.standard_normal((n, m)).astype("float32")
    v = rng.standard_normal((m, 16)).astype("float32")
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((n, 16), "float32"), dev)
    lib["main"](tvm.runtime.tensor(p, dev), tvm.runtime.tensor(v, dev), out)
    np.testing.assert_allclose(out.numpy(), p @ v, rtol=1e-4, atol=1e-4)
    return out.numpy()


def test_probs_at_v_gets_the_reduction_outermost_and_stays_exact(llvm_target) -> None:
    func = _pv()
    fixed = reduction_outer(func)
    assert fixed is not None
    script = fixed.script()
    assert "T.vectorized" in script and "_init" in script
    for n, m in VALUES:  # the same sums as the untuned kernel, at every value of both
        np.testing.assert_allclose(
            _run(fixed, n, m, llvm_target), _run(func, n, m, llvm_target), rtol=1e-5, atol=1e-5
        )


def test_kernels_without_the_pattern_are_left_alone() -> None:
    assert reduction_outer(_scores()) is None  # its reduction is short and static
    n, m = _two_vars()
    a = te.placeholder((n, m), name="A")
    assert (
        reduction_outer(te.create_prim_func([a, te.compute((n, m), lambda i, j: a[i, j] * 2)]))
        is None
    )


@pytest.mark.slow
def test_the_decoders_probs_at_v_is_built_with_it(tmp_path, llvm_target) -> None:
    """A decoder's build reports the fixed schedule on its two-variable ``probs @ V`` (one
    per layer) and on nothing else; the decoder tests check its tokens equal PyTorch's."""
    from database import Storage
    from tests.tuner.llm.conftest import save_tiny
    from tuner.compile import compile as build
    from tuner.model import load_model

    save_tiny("llama", tmp_path / "model")
    db = Storage(f"sqlite:///{tmp_path / 'empty.db'}")
    _, report = build(load_model(tmp_path / "model").mod, llvm_target, db)
    fixed = [k for k in report.kernels if "reduction loop outermost" in (k.dispatch or "")]
    assert len(fixed) == 1 and fixed[0].name.startswith("einsum")
