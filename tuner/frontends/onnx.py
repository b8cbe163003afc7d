"""ONNX models (``.onnx``) via ``tvm.relax.frontend.onnx.from_onnx``.

Symbolic dims come from the graph inputs' ``dim_param`` names: a name that is not an identifier
is made one (``seq.len`` -> ``seq_len``) so ``--shape`` can name it; a dim with neither a value
nor a name gets a fresh variable from TVM. TuneFarm does not need onnxruntime: ``bench`` checks
the tuned build against the untuned TVM build of the same import, and times ONNX Runtime beside
it when the ``ort`` extra is installed (:func:`ort_runner`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm

from database.errors import error_summary
from tuner.errors import TuneFarmError
from tuner.frontends import (
    detach,
    identifier,
    quiet,
    rename_symbolic_vars,
    require,
)
from tuner.frontends.reference import Imported
from tuner.symbolic.walk import vars_of


def load_onnx(path: Path, *, keep_params: bool = False) -> Imported:
    """Import an ONNX file; weights become constants unless ``keep_params``."""
    onnx = require("onnx", "onnx", ".onnx")
    try:
        proto = onnx.load(str(path))
    except Exception as err:
        raise TuneFarmError(f"cannot read {path} as ONNX: {error_summary(err)}") from None
    if not proto.graph.node:
        raise TuneFarmError(f"{path} holds no ONNX graph (no nodes)")
    try:
        onnx.checker.check_model(proto)
    except Exception as err:
        raise TuneFarmError(f"{path} is not a valid ONNX model: {error_summary(err)}") from None
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with quiet():
            mod = from_onnx(proto, keep_params_in_input=keep_params)
    except Exception as err:
        raise TuneFarmError(f"cannot import {path} into Relax: {error_summary(err)}") from None
    mod = rename_symbolic_vars(mod, {n: identifier(n) for n in _dim_names(mod)})
    params: tuple = ()
    if keep_params:
        mod, params = detach(mod)
    return Imported(mod=mod, params=params)


def _dim_names(mod: tvm.IRModule) -> list[str]:
    return list(vars_of(mod["main"].params))


def ort_runner(path: Path, threads: int) -> Callable[..., list[np.ndarray]]:
    """An ONNX Runtime session on ``path`` (CPU execution provider, ``threads`` intra-op
    threads, one inter-op thread); ``run(*inputs)`` feeds the graph's inputs in order (the data
    inputs: weights are initializers) and returns every output."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise TuneFarmError("not installed: pip install 'tunefarm[ort]'") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # errors only
    try:
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise TuneFarmError(f"ONNX Runtime cannot load the model: {error_summary(err)}") from None
    names = [i.name for i in session.get_inputs()]

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        feed = {n: np.ascontiguousarray(a) for n, a in zip(names, inputs, strict=False)}
        return [np.asarray(o) for o in session.run(None, feed)]

    return run
