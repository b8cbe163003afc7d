"""PyTorch exported programs (``.pt2``, written by ``torch.export.save``) into Relax.

The import is TVM's ``ExportedProgramImporter`` with every tensor's symbolic shape restored
from the program's own metadata and the symbols' ranges used to keep slices in bounds
(:mod:`tuner.frontends.torch_importer`), so plain ``torch.export`` files of Hugging Face
models import and build. An output type that only its library registers with pytree
(``transformers``' ``ModelOutput`` classes) is imported on demand.

A ``.pt2`` file does not keep the names of the ``torch.export.Dim`` objects: torch renames every
dynamic dim to a symbol such as ``s27``. :func:`export` (or ``torch.export.save`` with the
extra file :data:`DIMS_FILE`) records them, and the import renames the symbols back, so
``--shape seq=16,128`` works on a model exported with ``Dim("seq")``. Without the record the
torch symbol names are kept; ``--shape INPUT.AXIS=...`` addresses them by input and axis.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from database.errors import error_summary
from tuner.errors import TuneFarmError
from tuner.frontends import (
    clip_takes,
    detach,
    identifier,
    legalize_failure,
    quiet,
    rename_symbolic_vars,
    require,
)
from tuner.frontends.reference import Imported, Reference

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
    """Import a ``.pt2`` file; weights become constants unless ``keep_params``.

    The import restores every tensor's symbolic shape from the program's own metadata
    (:mod:`tuner.frontends.torch_importer`) and checks that the module legalizes; a failure
    is one line naming the operator, the node of the model and a hint.
    """
    torch = require("torch", "torch", ".pt2")
    extra = {DIMS_FILE: ""}
    ep = _load_program(torch, path, extra)
    _refuse_a_cache_in_buffers(ep, path)
    from tuner.frontends.torch_importer import (
        NodeImportError,
        describe_node,
        import_program,
        op_name,
    )

    try:
        with quiet():
            mod, importer = import_program(ep, keep_params=keep_params)
    except NodeImportError as err:
        raise TuneFarmError(
            f"cannot import {path} into Relax: {op_name(err.node)} at "
            f"{describe_node(err.node)}: {error_summary(err.cause)}; hint: {_hint(err.cause)}"
        ) from None
    except Exception as err:
        raise TuneFarmError(f"cannot import {path} into Relax: {error_summary(err)}") from None
    mod = clip_takes(mod)
    failure = legalize_failure(mod)
    if failure is not None:
        node = _node_of(mod, failure.var, importer.var_nodes)
        where = f" at {describe_node(node)}" if node is not None else ""
        if failure.op:
            where = f" {failure.op} (from {op_name(node)}){where}" if node else f" {failure.op}"
        raise TuneFarmError(
            f"cannot legalize {path}:{where}: {error_summary(failure.error)}; hint: TVM cannot "
            "lower this operator with these shapes; export this part with static shapes or "
            "report it with the node's source line"
        )
    try:
        names = json.loads(extra[DIMS_FILE]) if extra[DIMS_FILE] else {}
    except (ValueError, TypeError):
        names = {}
    mod = rename_symbolic_vars(mod, {str(k): identifier(str(v)) for k, v in names.items()})
    params: tuple = ()
    if keep_params:
        mod, params = detach(mod)
    return Imported(mod=mod, params=params, reference=Reference("pytorch", _runner(ep)))


def _refuse_a_cache_in_buffers(ep: Any, path: Path) -> None:
    """A decoder exported with its KV cache as buffers written in place (transformers'
    ``convert_and_export_with_cache``: ``static_cache`` buffers updated by ``index_put``)
    imports as a model whose cache never changes; say so, and what imports it instead."""
    buffers = [
        str(spec.target)
        for spec in ep.graph_signature.input_specs
        if spec.kind.name == "BUFFER" and spec.target is not None
    ]
    cached = [b for b in buffers if "cache" in b.lower() and ("key" in b or "value" in b)]
    if cached:
        raise TuneFarmError(
            f"{path} carries a KV cache as buffers written in place ({cached[0]}, ...: "
            "transformers' export with a cache); TuneFarm imports a decoder with its cache from "
            "the Hugging Face model folder instead: tunefarm tune MODEL_DIR (docs/decoders.md)"
        )


_UNREGISTERED = re.compile(r"Deserializing ([\w.]+) in pytree is not registered")


def _load_program(torch: Any, path: Path, extra: dict[str, str]) -> Any:
    """``torch.export.load``; an output type that only its library registers with pytree
    (``transformers.modeling_outputs.BaseModelOutput...``) is imported and the load retried."""
    tried: set[str] = set()
    while True:
        try:
            with quiet():
                return torch.export.load(str(path), extra_files=extra)
        except Exception as err:
            cls = _unregistered_type(path)
            if cls is None or cls in tried:
                raise TuneFarmError(
                    f"cannot read {path} as a torch.export program: {error_summary(err)}"
                ) from None
            tried.add(cls)
            module = cls.rsplit(".", 1)[0]
            try:
                with quiet():
                    importlib.import_module(module)
            except ImportError:
                top = module.split(".")[0]
                hint = " (tunefarm[hf])" if top == "transformers" else ""
                raise TuneFarmError(
                    f"cannot read {path}: its outputs are {cls}, a type {top} defines: "
                    f"pip install {top}{hint}"
                ) from None


def _unregistered_type(path: Path) -> str | None:
    """The pytree type a failed load of ``path`` did not know, from torch's own loader."""
    try:
        from torch.export.pt2_archive._package import load_pt2

        with quiet():
            load_pt2(str(path))
    except Exception as err:
        text = f"{err} {err.__cause__ or ''}"
        match = _UNREGISTERED.search(text)
        return match.group(1) if match else None
    return None


def _hint(err: BaseException) -> str:
    if "Unsupported function types" in str(err):
        return (
            "TVM's importer has no converter for this operator; replace it in the model "
            "(or compute it outside the exported part)"
        )
    return (
        "TVM's importer does not handle this use of the operator; export this part with "
        "static shapes or report it with the node's source line"
    )


def _node_of(mod: Any, var: str, var_nodes: Mapping[str, Any]) -> Any:
    """The FX node whose conversion emitted the binding ``var`` of ``main``: the node of the
    first binding from ``var`` on that is a node's result (a converter may emit several)."""
    names = [b.var.name for block in mod["main"].body.blocks for b in block.bindings]
    if var not in names:
        return None
    for name in names[names.index(var) :]:
        if name in var_nodes:
            return var_nodes[name]
    return None


class ProgramRunner:
    """Runs an exported program with PyTorch (eager) on numpy inputs: a model's reference.
    ``program`` is the ``torch.export.ExportedProgram`` itself, from which ``bench`` makes the
    other runtimes (:func:`compiled_runner`, :func:`export_onnx`)."""

    def __init__(self, program: Any) -> None:
        import torch

        self.program = program
        self.module = program.module()
        threads = os.environ.get("TVM_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # time PyTorch on as many threads as TVM
            torch.set_num_threads(int(threads))

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return _run_module(self.module, inputs)


def _run_module(module: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import torch
    from torch.utils._pytree import tree_leaves

    with torch.no_grad(), quiet():
        out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs))
    return [t.detach().numpy() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def _runner(ep: Any) -> Callable[..., list[np.ndarray]]:
    return ProgramRunner(ep)


def load_program(path: Path) -> Any:
    """The ``torch.export.ExportedProgram`` of a ``.pt2`` file (one-line errors)."""
    torch = require("torch", "torch", ".pt2")
    return _load_program(torch, path, {DIMS_FILE: ""})


def compiled_runner(program: Any) -> Callable[..., list[np.ndarray]]:
    """The exported program's module under ``torch.compile`` (inductor, ``dynamic=True``, on
    the CPU). Compilation happens at the first call at each new shape (a recompilation where
    torch specializes, e.g. a dim of 1): time the calls after it."""
    import torch

    module = torch.compile(program.module(), backend="inductor", dynamic=True)

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        return _run_module(module, inputs)

    return run


def export_onnx(program: Any, path: Path) -> Path:
    """``torch.onnx.export`` of the exported program (the dynamo exporter, which keeps its
    dynamic dims symbolic) into ``path`` (weights in ``path``.data beside it). A failure is one
    line naming torch's own root cause (the operator it has no ONNX function for)."""
    import contextlib
    import io

    import torch

    try:
        import onnxscript  # noqa: F401  (torch.onnx's dynamo exporter needs it)
    except ImportError:
        raise TuneFarmError(
            "torch.onnx.export needs onnxscript: pip install 'tunefarm[ort]'"
        ) from None
    try:
        with quiet(), contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(program, (), str(path), dynamo=True, verbose=False)
    except Exception as err:
        raise TuneFarmError(f"torch.onnx.export failed: {root_cause(err)}") from None
    return path


def root_cause(err: BaseException) -> str:
    """:func:`~database.errors.error_summary` of the innermost exception ``err`` was raised
    from (torch's exporters wrap the real error in pages of advice)."""
    seen = {id(err)}
    while True:
        inner = err.__cause__ or err.__context__
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        err = inner
    return error_summary(err, limit=240)
