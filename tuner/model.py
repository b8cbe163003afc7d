"""Loading a model: a Python/TVMScript file defining an IRModule, an IRModule as JSON, an ONNX
file (``.onnx``) or a PyTorch exported program (``.pt2``).

:func:`load_model` is the single entry point every command (tune, build, bench, submit) uses.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from database.errors import error_summary
from tuner.errors import TuneFarmError

_counter = itertools.count()


MODEL_SUFFIXES = (".py", ".json", ".onnx", ".pt2")


@dataclass(frozen=True)
class Reference:
    """An implementation to check a build against: ``fn(*inputs)`` returns the outputs as a
    flat list of arrays; ``name`` says what it is (``numpy``, ``pytorch``)."""

    name: str
    fn: Callable[..., list[np.ndarray]]


@dataclass(frozen=True)
class Model:
    """A loaded model: the IRModule plus optional helpers.

    ``numpy_reference(*inputs)`` is a TVMScript file's numpy implementation; ``reference`` is
    the implementation ``bench`` checks against (numpy for TVMScript files, PyTorch for
    ``.pt2``; none for ONNX and JSON, where the untuned build is the reference).
    ``shape_vars`` maps symbolic variable names to default bucket values (``SHAPE_VARS`` in
    the file). ``params`` are weights kept as inputs: the trailing parameters of ``main``.
    """

    path: Path
    mod: tvm.IRModule
    numpy_reference: Callable[..., Any] | None = None
    shape_vars: dict[str, list[int]] = field(default_factory=dict)
    params: tuple[np.ndarray, ...] = ()
    reference: Reference | None = None

    def __post_init__(self) -> None:
        if self.reference is None and self.numpy_reference is not None:
            ref = self.numpy_reference
            object.__setattr__(
                self, "reference", Reference("numpy", lambda *a: _flat_outputs(ref(*a)))
            )

    @property
    def num_inputs(self) -> int:
        """How many leading parameters of ``main`` are data inputs (the rest are weights)."""
        return len(self.mod["main"].params) - len(self.params)


def _flat_outputs(value: Any) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [a for item in value for a in _flat_outputs(item)]
    return [np.asarray(value)]


def check_model_path(path: Path) -> None:
    """A model path that :func:`load_model` can read: an existing file of a known type."""
    kinds = "a .py (TVMScript), .json (IRModule), .onnx or .pt2 (torch.export) file"
    if path.is_dir():
        raise TuneFarmError(f"{path} is a directory: MODEL must be {kinds}")
    if not path.exists():
        raise TuneFarmError(f"model file not found: {path}")
    if path.suffix not in MODEL_SUFFIXES:
        raise TuneFarmError(f"unsupported model file {path}: expected {kinds}")


def load_model(path: str | Path, entry: str = "Module", *, keep_params: bool = False) -> Model:
    """Load ``path``: ``.py`` with an IRModule named ``entry``, ``.json``, ``.onnx`` or ``.pt2``.

    ONNX and PyTorch weights are bound as constants unless ``keep_params`` (then they stay
    inputs of ``main`` and ``Model.params`` holds their values).
    """
    path = Path(path)
    check_model_path(path)
    if keep_params and path.suffix not in (".onnx", ".pt2"):
        raise TuneFarmError("--keep-params applies to .onnx and .pt2 models only")
    if path.suffix in (".onnx", ".pt2"):
        from tuner import frontends

        imported = frontends.load(path, keep_params=keep_params)
        return Model(
            path=path, mod=imported.mod, params=imported.params, reference=imported.reference
        )
    if path.suffix == ".json":
        try:
            mod = tvm.ir.load_json(path.read_text())
        except Exception as err:
            raise TuneFarmError(f"cannot load {path} as TVM JSON: {error_summary(err)}") from None
        if not isinstance(mod, tvm.IRModule):
            raise TuneFarmError(f"{path} holds a {type(mod).__name__}, not an IRModule")
        return Model(path=path, mod=mod)
    name = f"tunefarm_model_{next(_counter)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TuneFarmError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        sys.modules.pop(name, None)
        raise TuneFarmError(f"{path}:{err.lineno}: syntax error: {err.msg}") from None
    except Exception as err:
        sys.modules.pop(name, None)
        raise TuneFarmError(f"cannot load {path}: {error_summary(err)}") from None
    mod = getattr(module, entry, None)
    if not isinstance(mod, tvm.IRModule):
        found = [k for k, v in vars(module).items() if isinstance(v, tvm.IRModule)]
        hint = f" (IRModules in the file: {', '.join(found)}; use --entry)" if found else ""
        raise TuneFarmError(f"{path} defines no IRModule named {entry!r}{hint}")
    ref = getattr(module, "numpy_reference", None)
    shape_vars = getattr(module, "SHAPE_VARS", {}) or {}
    return Model(
        path=path,
        mod=mod,
        numpy_reference=ref if callable(ref) else None,
        shape_vars={str(k): [int(x) for x in v] for k, v in dict(shape_vars).items()},
    )
