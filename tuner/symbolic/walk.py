"""The one walk over symbolic dims: the dims of a function's parameters (a Relax function's
tensor parameters, a kernel's buffers) and the symbolic variables in them, in order of first
appearance. Every module that asks "which variables does this signature have" asks here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tvm import relax, tirx


def dims_of(param: Any) -> tuple[Any, ...]:
    """The shape of one parameter: a Relax tensor's dims, a buffer's shape; () when unknown."""
    ty = getattr(param, "ty", None)
    if isinstance(ty, relax.TensorType):
        return tuple(ty.shape.values) if ty.shape is not None else ()
    return tuple(getattr(param, "shape", None) or ())


def param_dims(params: Iterable[Any]) -> Iterator[tuple[Any, int, Any]]:
    """Every ``(param, axis, dim)`` of the parameters' shapes, in order."""
    for param in params:
        for axis, dim in enumerate(dims_of(param)):
            yield param, axis, dim


def dim_vars(dim: Any) -> list[tirx.Var]:
    """The symbolic variables of one dim (none for a constant)."""
    if isinstance(dim, tirx.IntImm):
        return []
    return list(tirx.analysis.undefined_vars(dim))


def vars_of(params: Iterable[Any]) -> dict[str, tirx.Var]:
    """The symbolic variables of the parameters' shapes, by name, in order of appearance."""
    found: dict[str, tirx.Var] = {}
    for _, _, dim in param_dims(params):
        for var in dim_vars(dim):
            found.setdefault(var.name, var)
    return found


def missing_vars(dim: Any, values: dict[str, Any]) -> list[str]:
    """Names of the dim's variables that ``values`` does not give."""
    return [v.name for v in dim_vars(dim) if v.name not in values]
