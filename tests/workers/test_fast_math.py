"""The float32 erf and tanh lowerings and the small-power lowering builders and builds share
(``workers/fast_math.py``)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import tvm
from tvm import te

from workers import fast_math


def _erf_kernel(dtype: str, n: int, vector: bool, fn: object = te.erf) -> tvm.runtime.Module:
    x = te.placeholder((n,), name="x", dtype=dtype)
    y = te.compute((n,), lambda i: fn(x[i]), name="y")
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


def _run(lib: tvm.runtime.Module, xs: np.ndarray) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib["main"](tvm.runtime.tensor(xs), out)
    return out.numpy()


@pytest.mark.parametrize("vector", [False, True])
def test_float32_tanh_is_a_vectorizable_rational(llvm_target, vector: bool) -> None:
    """gelu_new's tanh: no libm call, vector arithmetic, within 5e-7 of tanh, saturating."""
    assert fast_math.install()
    n = 4096
    lib = tvm.driver.build(_erf_kernel("float32", n, vector, te.tanh), target=llvm_target)
    ir = lib.inspect_source("ll")
    assert "llvm.exp" not in ir  # LLVM's own tanh: two exps, each a libm call per element
    assert re.search(r"<\d+ x float>", ir)
    xs = np.linspace(-12, 12, n).astype("float32")
    xs[:3] = [0.0, -np.inf, np.inf]
    got = _run(lib, xs)
    assert np.abs(got - np.tanh(xs.astype("float64"))).max() < 5e-7
    assert got[1] == -1.0 and got[2] == 1.0


@pytest.mark.parametrize(("exponent", "libm"), [(2.0, False), (3.0, False), (2.5, True)])
def test_small_integer_powers_are_multiplies(llvm_target, exponent: float, libm: bool) -> None:
    """pow(x, 2) and pow(x, 3) are multiplies (exact for negative x too); other exponents
    keep powf."""
    assert fast_math.install()
    n = 1024

    def power(v: object) -> object:
        return te.power(v, tvm.tirx.const(exponent, "float32"))

    lib = tvm.driver.build(_erf_kernel("float32", n, True, power), target=llvm_target)
    assert ("llvm.pow" in lib.inspect_source("ll")) == libm
    xs = np.linspace(0 if libm else -5, 5, n).astype("float32")
    np.testing.assert_allclose(_run(lib, xs), xs.astype("float64") ** exponent, rtol=1e-6)


def test_float64_tanh_keeps_llvms_lowering(llvm_target) -> None:
    """The float32 lowering hands every other dtype to the rule it replaced."""
    fast_math.install()
    lib = tvm.driver.build(_erf_kernel("float64", 256, False, te.tanh), target=llvm_target)
    xs = np.linspace(-3, 3, 256)
    assert np.abs(_run(lib, xs) - np.tanh(xs)).max() < 1e-15


@pytest.mark.parametrize("vector", [False, True])
def test_float32_exp_is_a_vectorizable_polynomial(llvm_target, vector: bool) -> None:
    """softmax's and SiLU's exp: no libm call, vector arithmetic, within 1.5 ulp of exp over
    the float range; exactly 0 below ln(FLT_MIN) (-inf: a softmax's padding), inf above
    ln(FLT_MAX), NaN for NaN."""
    assert fast_math.install()
    n = 4096
    lib = tvm.driver.build(_erf_kernel("float32", n, vector, te.exp), target=llvm_target)
    ir = lib.inspect_source("ll")
    assert "@expf" not in ir and "llvm.exp" not in ir
    assert re.search(r"<\d+ x float>", ir)
    xs = np.linspace(-110, 100, n).astype("float32")
    xs[:6] = [0.0, -np.inf, np.inf, np.nan, -1e30, 88.7]
    got = _run(lib, xs)
    assert got[0] == 1.0 and got[1] == 0.0 and got[2] == np.inf and np.isnan(got[3])
    assert got[4] == 0.0 and np.isfinite(got[5])
    expected = np.exp(xs.astype("float64"))
    normal = (expected > np.finfo("float32").tiny) & (expected < np.finfo("float32").max)
    assert np.max(np.abs(got[normal] - expected[normal]) / expected[normal]) < 1e-7
    assert np.all(got[xs < -87.4] == 0.0) and np.all(got[(xs > 88.8) & ~np.isnan(xs)] == np.inf)


def test_float64_exp_keeps_libm(llvm_target) -> None:
    fast_math.install()
    lib = tvm.driver.build(_erf_kernel("float64", 256, False, te.exp), target=llvm_target)
    xs = np.linspace(-30, 30, 256)
    np.testing.assert_allclose(_run(lib, xs), np.exp(xs), rtol=1e-15)
