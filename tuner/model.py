"""Loading a model: a Python/TVMScript file defining an IRModule, or an IRModule as JSON."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm

from tuner.errors import TuneFarmError

_counter = itertools.count()


@dataclass(frozen=True)
class Model:
    """A loaded model: the IRModule plus optional helpers the file defines.

    ``numpy_reference(*inputs)`` computes the expected output in numpy; ``shape_vars`` maps
    symbolic variable names to default bucket values (``SHAPE_VARS`` in the file).
    """

    path: Path
    mod: tvm.IRModule
    numpy_reference: Callable[..., Any] | None = None
    shape_vars: dict[str, list[int]] = field(default_factory=dict)


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    text = lines[-1].strip() if lines else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def load_model(path: str | Path, entry: str = "Module") -> Model:
    """Load ``path`` (``.py`` with an IRModule named ``entry``, or ``.json``)."""
    path = Path(path)
    if not path.is_file():
        raise TuneFarmError(f"model file not found: {path}")
    if path.suffix == ".json":
        try:
            mod = tvm.ir.load_json(path.read_text())
        except Exception as err:
            raise TuneFarmError(f"cannot load {path} as TVM JSON: {_first_line(err)}") from None
        if not isinstance(mod, tvm.IRModule):
            raise TuneFarmError(f"{path} holds a {type(mod).__name__}, not an IRModule")
        return Model(path=path, mod=mod)
    if path.suffix != ".py":
        raise TuneFarmError(f"unsupported model file {path}: expected .py (TVMScript) or .json")
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
        raise TuneFarmError(f"cannot load {path}: {_first_line(err)}") from None
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
