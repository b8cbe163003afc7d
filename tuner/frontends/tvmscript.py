"""Models written for TVM itself: a Python/TVMScript file defining an IRModule (with an
optional ``numpy_reference`` and ``SHAPE_VARS``), or an IRModule saved as JSON."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import tvm

from database.errors import error_summary
from tuner.errors import TuneFarmError
from tuner.frontends.reference import Imported

_counter = itertools.count()


def load_ir_json(path: Path) -> Imported:
    """An IRModule saved with ``tvm.ir.save_json``."""
    try:
        mod = tvm.ir.load_json(path.read_text())
    except Exception as err:
        raise TuneFarmError(f"cannot load {path} as TVM JSON: {error_summary(err)}") from None
    if not isinstance(mod, tvm.IRModule):
        raise TuneFarmError(f"{path} holds a {type(mod).__name__}, not an IRModule")
    return Imported(mod=mod)


def load_tvmscript(path: Path, entry: str = "Module") -> Imported:
    """The IRModule named ``entry`` in a Python file, its ``numpy_reference`` (if any; the
    :class:`~tuner.model.Model` makes it the reference) and its ``SHAPE_VARS`` (the default
    buckets)."""
    name = f"tunefarm_model_{next(_counter)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TuneFarmError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript's parser looks the module up while it runs
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
    ref = ref if callable(ref) else None
    shape_vars = getattr(module, "SHAPE_VARS", {}) or {}
    return Imported(
        mod=mod,
        numpy_reference=ref,
        shape_vars={str(k): [int(x) for x in v] for k, v in dict(shape_vars).items()},
    )
