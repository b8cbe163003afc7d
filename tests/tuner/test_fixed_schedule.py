"""The fixed CPU schedule of kernels over several symbolic variables
(:mod:`tuner.symbolic.fixed`): real kernels built and run at many values of both variables,
their outputs equal to numpy's and the untuned kernel's; the decoder's build uses it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tvm
from tvm import te, tirx, topi

from tuner.symbolic.fixed import fixed_schedule

VALUES = [(1, 1), (1, 37), (5, 3), (16, 64), (3, 200), (70, 129)]
# int64 extents, as Relax writes them (an int32 one would put casts in the fused loops' indices)
HEAD, HEADS = tirx.IntImm("int64", 16), tirx.IntImm("int64", 2)


def _two_vars() -> tuple[tirx.Var, tirx.Var]:
    return tirx.Var("n", "int64"), tirx.Var("m", "int64")


def _pv() -> tirx.PrimFunc:
    """``probs @ V`` over both: probs ``[2, n, m]``, V ``[m, 2, 16]`` (a sum over ``m`` per
    key head, the cache's layout)."""
    n, m = _two_vars()
    p = te.placeholder((HEADS, n, m), name="P")
    v = te.placeholder((m, HEADS, HEAD), name="V")
    k = te.reduce_axis((0, m), name="k")
    out = te.compute(
        (HEADS, n, HEAD), lambda h, i, j: te.sum(p[h, i, k] * v[k, h, j], axis=k), name="O"
    )
    return te.create_prim_func([p, v, out])


def _masked_scores() -> tirx.PrimFunc:
    """``(q @ k^T + mask) * scale`` per key head: a static reduction of 16 innermost, ``m``
    spatial, the causal mask's elementwise steps after it (as the decoder's fused kernel)."""
    n, m = _two_vars()
    q = te.placeholder((HEADS, n, HEAD), name="Q")
    k = te.placeholder((m, HEADS, HEAD), name="K")
    r = te.reduce_axis((0, HEAD), name="r")
    s = te.compute((HEADS, n, m), lambda h, i, j: te.sum(q[h, i, r] * k[j, h, r], axis=r), name="S")
    after = te.compute((n, m), lambda i, j: (j > i + m - n).astype("float32"), name="after")
    mask = te.compute((n, m), lambda i, j: after[i, j] * tirx.const(-1e30, "float32"), name="M")
    added = te.compute((HEADS, n, m), lambda h, i, j: s[h, i, j] + mask[i, j], name="A")
    out = te.compute((HEADS, n, m), lambda h, i, j: added[h, i, j] * 0.25, name="O")
    return te.create_prim_func([q, k, out])


def _scores() -> tirx.PrimFunc:
    """``q @ k^T`` alone, batch first, keys ``[batch, m, heads, 16]`` (the cache's layout):
    the scores are the output, no step after them."""
    n, m = _two_vars()
    one = tirx.IntImm("int64", 1)
    q = te.placeholder((one, HEADS, n, HEAD), name="Q")
    k = te.placeholder((one, m, HEADS, HEAD), name="K")
    r = te.reduce_axis((0, HEAD), name="r")
    s = te.compute(
        (one, HEADS, n, m),
        lambda b, h, i, j: te.sum(q[b, h, i, r] * k[b, j, h, r], axis=r),
        name="S",
    )
    return te.create_prim_func([q, k, s])


def _softmax() -> tirx.PrimFunc:
    n, m = _two_vars()
    x = te.placeholder((HEADS, n, m), name="X")
    return te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])


def _numpy_pv(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("hik,khj->hij", p, v)


def _numpy_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    n, m = q.shape[1], k.shape[0]
    after = np.arange(m)[None, :] > (np.arange(n)[:, None] + m - n)
    return (np.einsum("hir,jhr->hij", q, k) + after * np.float32(-1e30)) * np.float32(0.25)


def _numpy_bare_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    return np.einsum("bhir,bjhr->bhij", q, k)


def _numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _run(func: tirx.PrimFunc, n: int, m: int, target: tvm.target.Target) -> list[np.ndarray]:
    """``func`` built and run at ``n, m`` on random inputs: its inputs and output."""
    from tvm.sym import Analyzer

    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    analyzer = Analyzer()
    for p in func.params:
        for d in p.shape:
            for var in tirx.analysis.undefined_vars(d):
                analyzer.bind(var, tirx.IntImm("int64", {"n": n, "m": m}[var.name]))
    rng = np.random.default_rng(n * 1000 + m)
    arrays = [
        rng.standard_normal([int(analyzer.simplify(d)) for d in p.shape]).astype("float32")
        for p in func.params
    ]
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*args)
    return [*arrays[:-1], args[-1].numpy()]


CASES: list[tuple[Callable[[], tirx.PrimFunc], Callable[..., np.ndarray], tuple[str, ...]]] = [
    (_pv, _numpy_pv, ("parallel over rows", "reduction loop outermost")),
    (_masked_scores, _numpy_scores, ("elementwise steps inlined", "scores in key tiles")),
    (_scores, _numpy_bare_scores, ("scores in key tiles",)),
    (_softmax, _numpy_softmax, ("parallel over rows",)),
]


@pytest.mark.parametrize(
    ("make", "reference", "steps"), CASES, ids=["pv", "scores", "bare-scores", "softmax"]
)
def test_the_fixed_schedule_applies_its_steps_and_stays_exact(
    make, reference, steps, llvm_target
) -> None:
    func = make()
    fixed = fixed_schedule(func)
    assert fixed is not None and fixed.steps == steps
    script = fixed.func.script()
    assert "T.parallel" in script
    if "reduction loop outermost" in steps or "scores in key tiles" in steps:
        assert "T.vectorized" in script
    for n, m in VALUES:  # the same sums as the untuned kernel and numpy, at every value
        *inputs, out = _run(fixed.func, n, m, llvm_target)
        np.testing.assert_allclose(out, reference(*inputs), rtol=1e-4, atol=1e-4)
        *_, untuned = _run(func, n, m, llvm_target)
        np.testing.assert_allclose(out, untuned, rtol=1e-5, atol=1e-5)


def test_scores_that_are_no_einsum_keep_parallel_rows(llvm_target) -> None:
    """Keys read in reverse (an index no padding can follow): the key tiles give way to
    parallel rows, still exact."""
    n, m = _two_vars()
    q = te.placeholder((HEADS, n, HEAD), name="Q")
    k = te.placeholder((m, HEADS, HEAD), name="K")
    r = te.reduce_axis((0, HEAD), name="r")
    s = te.compute(
        (HEADS, n, m), lambda h, i, j: te.sum(q[h, i, r] * k[m - 1 - j, h, r], axis=r), name="S"
    )
    func = te.create_prim_func([q, k, s])
    fixed = fixed_schedule(func)
    assert fixed is not None and fixed.steps == ("parallel over rows",)
    for n_, m_ in VALUES:
        qa, ka, out = _run(fixed.func, n_, m_, llvm_target)
        np.testing.assert_allclose(
            out, np.einsum("hir,jhr->hij", qa, ka[::-1]), rtol=1e-4, atol=1e-4
        )


def test_kernels_without_work_inside_their_rows_are_left_alone() -> None:
    n, m = _two_vars()
    ramp = te.compute((n + m,), lambda i: i.astype("int32"), name="R")  # an arange
    assert fixed_schedule(te.create_prim_func([ramp])) is None
    a = te.placeholder((4, 8), name="A")  # static: no symbolic loop to split over
    copy = te.compute((4, 8), lambda i, j: a[i, j], name="B")
    assert fixed_schedule(te.create_prim_func([a, copy])) is None


@pytest.mark.slow
def test_the_decoders_two_variable_kernels_are_built_with_it(tmp_path, llvm_target) -> None:
    """A decoder's build reports the fixed schedule on its two-variable kernels: the
    reduction outermost on ``probs @ V`` only (one per layer), key tiles on the masked
    scores, rows in parallel on softmax and cache copies; the decoder tests check its tokens
    equal PyTorch's."""
    from database import Storage
    from tests.tuner.llm.conftest import save_tiny
    from tuner.compile import compile as build
    from tuner.model import load_model

    save_tiny("llama", tmp_path / "model")
    db = Storage(f"sqlite:///{tmp_path / 'empty.db'}")
    _, report = build(load_model(tmp_path / "model").mod, llvm_target, db)
    two = [k for k in report.kernels if "several symbolic variables" in (k.dispatch or "")]
    outer = [k for k in two if "reduction loop outermost" in k.dispatch]
    assert len(outer) == 1 and outer[0].name.startswith("einsum")
    parallel = {k.name.rstrip("0123456789") for k in two if "parallel over rows" in k.dispatch}
    assert {"einsum", "softmax", "concatenate"} <= parallel
    assert any("elementwise steps inlined" in k.dispatch for k in two)
    tiled = [k for k in two if "scores in key tiles" in k.dispatch]  # the masked scores
    assert len(tiled) == 1 and tiled[0].name.startswith("fused_einsum")
