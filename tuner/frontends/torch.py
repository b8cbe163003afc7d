"""PyTorch exported programs (``.pt2``, written by ``torch.export.save``) via
``tvm.relax.frontend.torch.from_exported_program``.

A ``.pt2`` file does not keep the names of the ``torch.export.Dim`` objects: torch renames every
dynamic dim to a symbol such as ``s27``. :func:`export` (or ``torch.export.save`` with the
extra file :data:`DIMS_FILE`) records them, and the import renames the symbols back, so
``--shape seq=16,128`` works on a model exported with ``Dim("seq")``. Without the record the
torch symbol names are kept (an unknown ``--shape`` name lists them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tuner.errors import TuneFarmError
from tuner.frontends import (
    Imported,
    clip_constant_takes,
    detach,
    first_line,
    identifier,
    quiet,
    rename_symbolic_vars,
    require,
)
from tuner.model import Reference

DIMS_FILE = "tunefarm_dims.json"


def export(
    module: Any,
    args: tuple,
    path: str | Path,
    dynamic_shapes: Mapping[str, Any] | Sequence[Any] | None = None,
) -> Any:
    """``torch.export.export`` + ``torch.export.save`` that also records the ``Dim`` names.

    ``dynamic_shapes`` is ``torch.export``'s: per input (by argument name or position) a
    mapping axis -> ``Dim``. Returns the exported program.
    """
    torch = require("torch", "torch", ".pt2")
    ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    torch.export.save(
        ep, str(path), extra_files={DIMS_FILE: json.dumps(dim_names(ep, dynamic_shapes))}
    )
    return ep


def dim_names(ep: Any, dynamic_shapes: Mapping[str, Any] | Sequence[Any] | None) -> dict[str, str]:
    """torch symbol name -> ``Dim`` name, for every dynamic dim of the user inputs."""
    if not dynamic_shapes:
        return {}
    arg_names = ep.module_call_graph[0].signature.forward_arg_names or []
    user = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = [n for n in user if n.name in set(ep.graph_signature.user_inputs)]
    out: dict[str, str] = {}
    for pos, node in enumerate(user):
        if isinstance(dynamic_shapes, Mapping):
            spec = dynamic_shapes.get(arg_names[pos]) if pos < len(arg_names) else None
        else:
            spec = dynamic_shapes[pos] if pos < len(dynamic_shapes) else None
        if not spec:
            continue
        axes = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
        shape = node.meta["val"].shape
        for axis, dim in axes:
            name = getattr(dim, "__name__", None)
            sym = str(shape[axis])
            if name and not sym.isdigit():
                out[sym] = name
    return out


def load_exported(path: Path, *, keep_params: bool = False) -> Imported:
    """Import a ``.pt2`` file; weights become constants unless ``keep_params``."""
    torch = require("torch", "torch", ".pt2")
    extra = {DIMS_FILE: ""}
    try:
        with quiet():
            ep = torch.export.load(str(path), extra_files=extra)
    except Exception as err:
        raise TuneFarmError(
            f"cannot read {path} as a torch.export program: {first_line(err)}"
        ) from None
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with quiet():
            mod = from_exported_program(ep, keep_params_as_input=keep_params)
    except Exception as err:
        raise TuneFarmError(f"cannot import {path} into Relax: {first_line(err)}") from None
    try:
        names = json.loads(extra[DIMS_FILE]) if extra[DIMS_FILE] else {}
    except (ValueError, TypeError):
        names = {}
    mod = rename_symbolic_vars(mod, {str(k): identifier(str(v)) for k, v in names.items()})
    mod = clip_constant_takes(mod)
    params: tuple = ()
    if keep_params:
        mod, params = detach(mod)
    return Imported(mod=mod, params=params, reference=Reference("pytorch", _runner(ep)))


def _runner(ep: Any) -> Callable[..., list[np.ndarray]]:
    import torch
    from torch.utils._pytree import tree_leaves

    module = ep.module()
    threads = os.environ.get("TVM_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # time PyTorch on as many threads as TVM
        torch.set_num_threads(int(threads))

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        with torch.no_grad(), quiet():
            out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs))
        return [t.detach().numpy() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]

    return run
