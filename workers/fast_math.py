"""Vectorizable float32 ``erf``, ``tanh`` and ``exp``, and small integer powers, for LLVM targets
(CPU builds).

TVM lowers ``tirx.erf`` on LLVM targets to a call of libm's scalar ``erff`` per element, which
also keeps LLVM from vectorizing the loop around it: an erf-GELU epilogue then costs ~15 ns an
element and dominates a tuned matmul (measured: 29 GFLOPS for x[128,256]·W[256,512]+GELU,
against 197 for the same matmul with a bias epilogue). This module registers, at a higher
level than TVM's rule, a lowering to the rational approximation of Eigen's
``generic_fast_erf_float`` (TVM's own ``topi.fast_erf``): 0.12 ns an element, max abs error
3.3e-7 over [-6, 6] (libm's: 4.7e-8). Every process that builds (builders and ``tunefarm build``)
installs it on import, so tuning measures what the build ships. ``TUNEFARM_PRECISE_MATH=1``
keeps libm's ``erff``.

``tanh`` and ``pow`` are the same story: libm's ``tanhf``/``powf`` per element. GPT-2's
``gelu_new`` (``tanh`` of ``x + 0.044715 * pow(x, 3)``) took 38% of the tuned model; with
Eigen's rational ``tanh`` (TVM's ``topi.fast_tanh``: max abs error < 5e-7) and ``pow(x, 2|3)``
as multiplies, its kernel at s=64 takes 12 us instead of 357 us vectorized. The lowerings
change code generation only, not the kernels' TIR, so records tuned before stay valid.

``exp`` too (softmax, SiLU's sigmoid): Cephes' ``expf`` polynomial, within 1.3 ulp, exactly 0
below ``ln(FLT_MIN)`` as softmax range kernels padded with -inf need. On a 0.5B decoder's
256-token prefill (2-core Xeon) the gate projection with its SiLU took 12.4 ms a layer with
libm's ``expf``, 9.8 with this (the product alone: 9.3), and the softmax 2.2 ms, 1.1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from tvm import tirx

# Eigen's generic_fast_erf_float: erf(x) = x * P(x^2) / Q(x^2) on [-4, 4], +-1 beyond.
_ALPHA = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_BETA = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)
# Eigen's float tanh: x * P(x^2) / Q(x^2) on [-9, 9] (TVM's fast_tanh_float)
_TANH_ALPHA = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_BETA = (
    1.19825839466702e-06,
    1.18534705686654e-04,
    2.26843463243900e-03,
    4.89352518554385e-03,
)
# Cephes' expf: exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts),
# exp(r) on [-ln 2 / 2, ln 2 / 2] by a degree-7 polynomial
_EXP_POLY = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_LOG2E = 1.44269504088896341
_EXP_LO = -87.3365478515625  # exp below: 0 (libm: a denormal of at most 1.2e-38)
_EXP_HI = 88.72283935546875  # above: inf, as libm
_POWERS = (2.0, 3.0)  # exponents lowered to multiplies
_installed = False


def _horner(coefs: tuple[float, ...], x2: Any, c: Any) -> Any:
    """``coefs[0] * x2^(n-1) + ... + coefs[-1]``, each constant made by ``c``."""
    out = c(coefs[0])
    for a in coefs[1:]:
        out = out * x2 + c(a)
    return out


def _float32_constants(call: Any) -> Callable[[float], Any] | None:
    """A maker of constants of ``call``'s type (scalar or vector) when it is float32; None
    otherwise (the lowering then leaves the call as it is)."""
    dtype = str(call.ty)
    if not dtype.startswith("float32"):
        return None
    return lambda value: tirx.const(value, dtype)


def fast_tanh(call: Any) -> Any:
    """The lowering of one ``tirx.tanh`` call: Eigen's rational approximation for float32
    (scalar or vector), the call unchanged otherwise."""
    c = _float32_constants(call)
    if c is None:
        return call
    x = tirx.max(tirx.min(call.args[0], c(9.0)), c(-9.0))
    x2 = x * x
    return x * _horner(_TANH_ALPHA, x2, c) / _horner(_TANH_BETA, x2, c)


def fast_exp(call: Any) -> Any:
    """The lowering of one ``tirx.exp`` call: Cephes' polynomial for float32 (scalar or vector:
    LLVM's ``exp`` intrinsic is a libm call per element), exactly 0 below ``ln(FLT_MIN)`` (so
    ``exp(-inf) = 0`` as a softmax padded with -inf needs), inf above ``ln(FLT_MAX)``, NaN for
    NaN; the call unchanged for other dtypes."""
    c = _float32_constants(call)
    if c is None:
        return call
    dtype = str(call.ty)
    itype = dtype.replace("float32", "int32")
    x = call.args[0]
    xc = tirx.max(tirx.min(x, c(_EXP_HI)), c(_EXP_LO))
    n = tirx.floor(xc * c(_LOG2E) + c(0.5))
    r = xc - n * c(_LN2_HI) - n * c(_LN2_LO)
    p = _horner(_EXP_POLY, r, c) * r * r + r + c(1.0)

    def power_of_two(k: Any) -> Any:  # 2^k for an integer k in [-126, 127]
        biased = tirx.Cast(itype, k) + tirx.const(127, itype)
        return tirx.reinterpret(dtype, tirx.shift_left(biased, tirx.const(23, itype)))

    half = tirx.floor(n * c(0.5))  # 2^n as 2^half * 2^(n - half): n reaches 128 near ln(FLT_MAX)
    out = p * power_of_two(half) * power_of_two(n - half)
    out = tirx.Select(x < c(_EXP_LO), c(0.0), out)
    out = tirx.Select(x > c(_EXP_HI), c(math.inf), out)
    return tirx.Select(tirx.isnan(x), x, out)


def _constant(expr: Any) -> float | None:
    """The value of a float constant, scalar or broadcast to a vector; None otherwise."""
    if isinstance(expr, tirx.Broadcast):
        expr = expr.value
    return float(expr.value) if isinstance(expr, tirx.FloatImm) else None


def small_power(call: Any) -> Any:
    """The lowering of one ``tirx.pow`` call: ``x * x`` or ``x * x * x`` for a constant
    exponent of 2 or 3, the call unchanged otherwise (TVM's ``powf`` then)."""
    base, exponent = call.args
    n = _constant(exponent)
    if n not in _POWERS:
        return call
    out = base
    for _ in range(int(n) - 1):
        out = out * base
    return out


def fast_erf(call: Any) -> Any:
    """The lowering of one ``tirx.erf`` call: the polynomial for float32 (scalar or vector),
    the call unchanged otherwise (TVM's rule then applies)."""
    c = _float32_constants(call)
    if c is None:
        return call
    x = tirx.max(tirx.min(call.args[0], c(4.0)), c(-4.0))
    x2 = x * x
    return _horner(_ALPHA, x2, c) * x / _horner(_BETA, x2, c)


def _or_else(f: Any, op: str) -> Any:
    """``f``, falling back to the LLVM lowering it replaces (float64 ``tanh``, ``powf``) where
    it leaves the call as it was."""
    import tvm

    previous = tvm.ir.Op.get(op).get_attr("llvm.FLowerIntrinsic")

    def lower(call: Any) -> Any:
        out = f(call)
        return previous(call) if out is call and previous is not None else out

    return lower


def install() -> bool:
    """Register the lowering once per process; False when ``TUNEFARM_PRECISE_MATH=1``."""
    global _installed
    if os.environ.get("TUNEFARM_PRECISE_MATH") == "1":
        return False
    if not _installed:
        for op, f in (
            ("tirx.erf", fast_erf),
            ("tirx.tanh", fast_tanh),
            ("tirx.pow", small_power),
            ("tirx.exp", fast_exp),
        ):
            tirx.op.register_intrin_lowering(op, target="llvm", f=_or_else(f, op), level=99)
        _installed = True
    return True
