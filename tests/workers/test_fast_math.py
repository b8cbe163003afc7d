"""The float32 erf lowering builders and builds share (``workers/fast_math.py``)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import tvm
from tvm import te

from workers import fast_math


def _erf_kernel(dtype: str, n: int, vector: bool) -> tvm.runtime.Module:
    x = te.placeholder((n,), name="x", dtype=dtype)
    y = te.compute((n,), lambda i: te.erf(x[i]), name="y")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
    if vector:  # an explicitly vectorized erf: lowered on float32x16 values
        (i,) = sch.get_loops(sch.get_sblock("y"))
        _, inner = sch.split(i, [None, 16])
        sch.vectorize(inner)
    return sch.mod


@pytest.mark.parametrize("vector", [False, True])
def test_float32_erf_is_a_vectorizable_polynomial(llvm_target, vector: bool) -> None:
    assert fast_math.install()
    n = 4096
    lib = tvm.driver.build(_erf_kernel("float32", n, vector), target=llvm_target)
    ir = lib.inspect_source("ll")
    assert "@erff" not in ir  # no scalar libm call left
    assert re.search(r"<\d+ x float>", ir)  # vector arithmetic
    xs = np.linspace(-6, 6, n).astype("float32")
    xs[:3] = [0.0, -np.inf, np.inf]
    out = tvm.runtime.tensor(np.zeros(n, "float32"))
    lib["main"](tvm.runtime.tensor(xs), out)
    expected = np.array([math.erf(v) for v in xs.astype("float64")])
    assert np.abs(out.numpy() - expected).max() < 5e-7


def test_float64_erf_keeps_libm(llvm_target) -> None:
    fast_math.install()
    n = 256
    lib = tvm.driver.build(_erf_kernel("float64", n, False), target=llvm_target)
    xs = np.linspace(-3, 3, n)
    out = tvm.runtime.tensor(np.zeros(n))
    lib["main"](tvm.runtime.tensor(xs), out)
    assert np.abs(out.numpy() - np.array([math.erf(v) for v in xs])).max() < 1e-15
