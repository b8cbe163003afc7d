"""Model frontends into Relax: TVMScript files and IRModule JSON (``tvmscript``), ONNX
(``.onnx``) and PyTorch exported programs (``.pt2``, ``torch``).

``tuner.model.load_model`` picks the frontend by file suffix; ONNX and PyTorch import their
framework lazily, so TuneFarm works without them and a model needing one names the extra to
install. A frontend returns an :class:`~tuner.frontends.reference.Imported`: the Relax module
(symbolic dims named as in the source model), the weights when they are kept as inputs, and
a reference implementation when one can run the model itself.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from tuner.errors import TuneFarmError
from tuner.frontends.reference import Imported
from tuner.symbolic.walk import vars_of

SUFFIXES = {".py": "tvmscript", ".json": "json", ".onnx": "onnx", ".pt2": "torch"}


def load(path: Path, *, entry: str = "Module", keep_params: bool = False) -> Imported:
    """Import ``path`` with the frontend of its suffix (``entry``: the IRModule's name in a
    TVMScript file)."""
    name = SUFFIXES.get(path.suffix)
    if name in ("tvmscript", "json"):
        from tuner.frontends.tvmscript import load_ir_json, load_tvmscript

        return load_tvmscript(path, entry) if name == "tvmscript" else load_ir_json(path)
    if name == "onnx":
        from tuner.frontends.onnx import load_onnx

        return load_onnx(path, keep_params=keep_params)
    if name == "torch":
        from tuner.frontends.torch import load_exported

        return load_exported(path, keep_params=keep_params)
    raise TuneFarmError(f"no frontend for {path.suffix} files (known: {', '.join(SUFFIXES)})")


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or fail with one line naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TuneFarmError(
            f"{what} models need {module}: pip install 'tunefarm[{extra}]'"
        ) from None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the frameworks' warnings and log records (torch logs whole tracebacks on a
    bad file): a bad model must give one line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def identifier(name: str) -> str:
    """A symbolic dim's name usable in ``--shape NAME=...`` (non-word characters -> ``_``)."""
    out = re.sub(r"\W", "_", name)
    return out if out and not out[0].isdigit() else f"d_{out}"


def rename_symbolic_vars(mod: tvm.IRModule, names: dict[str, str]) -> tvm.IRModule:
    """``main`` with its symbolic variables renamed (old name -> new name), bounds included."""
    names = {old: new for old, new in names.items() if old != new}
    if not names:
        return mod
    func = mod["main"]
    found = vars_of(func.params)
    taken = set(found)
    clash = sorted(set(names.values()) & (taken - set(names)))
    if clash or len(set(names.values())) != len(names):
        raise TuneFarmError(f"cannot rename symbolic dims {names}: names clash ({clash})")
    mapping = {
        name: tvm.tirx.Var(names[name], var.ty) for name, var in found.items() if name in names
    }
    func = func.bind_symbolic_vars(mapping)
    for key in ("tir_var_upper_bound", "tir_var_lower_bound"):
        bounds = func.attrs.get(key) if func.attrs is not None else None
        if bounds:
            func = func.with_attr(
                key, {names.get(str(k), str(k)): int(v) for k, v in bounds.items()}
            )
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out["main"] = func
    return out


def detach(mod: tvm.IRModule) -> tuple[tvm.IRModule, tuple[np.ndarray, ...]]:
    """Move the weights a frontend attached to ``main`` (attribute ``params``) out of the IR."""
    mod, params = relax.frontend.detach_params(mod)
    return mod, tuple(p.numpy() for p in params.get("main", []))


def clip_takes(mod: tvm.IRModule) -> tvm.IRModule:
    """``take`` in ``mode="fast"`` -> ``mode="clip"``: the same result for in-range indices
    (constant ones, and token ids within the vocabulary), no segfault on an out-of-range token
    id, and no "Fast mode segfaults when there are out-of-bounds indices" printed by TVM at
    every legalization."""
    take = tvm.ir.Op.get("relax.take")

    @relax.expr_functor.mutator
    class _Clip(relax.PyExprMutator):
        def visit_call_(self, call: relax.Call) -> relax.Expr:
            call = super().visit_call_(call)
            if isinstance(call, relax.Call) and call.op.same_as(take) and call.attrs.mode == "fast":
                return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
            return call

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = _Clip(mod).visit_expr(func)
    return out


@dataclass(frozen=True)
class LegalizeFailure:
    """The first call of a Relax function that ``LegalizeOps`` cannot lower: the operator,
    the name of the variable it is bound to, and TVM's error."""

    op: str
    var: str
    error: BaseException


def legalize_failure(mod: tvm.IRModule) -> LegalizeFailure | None:
    """None when ``LegalizeOps`` lowers ``mod``; else the failing call, found by legalizing
    the calls one by one (TVM's own error names neither the operator nor the binding)."""
    try:
        with quiet():
            relax.transform.LegalizeOps()(mod)
        return None
    except Exception as err:
        first = err
    found: list[LegalizeFailure] = []

    @relax.expr_functor.visitor
    class _Probe(relax.PyExprVisitor):
        def visit_var_binding_(self, binding: relax.VarBinding) -> None:
            call = binding.value
            if found or not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
                return
            legalize = call.op.get_attr("FLegalize")
            if legalize is None:
                return
            bb = relax.BlockBuilder(mod)
            try:
                with quiet(), bb.function("probe", []):
                    legalize(bb, call)
                    bb.emit_func_output(relax.Tuple([]))
            except Exception as err:
                found.append(LegalizeFailure(call.op.name, binding.var.name, err))

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not found:
            _Probe().visit_expr(func)
    return found[0] if found else LegalizeFailure("", "", first)
