"""Import TVM without importing PyTorch.

``tvm_ffi`` (under ``import tvm``) and ``tvm.relax.base_py_module`` import ``torch`` whenever
it is installed, for a DLPack fast path, a Windows-only symbol workaround and TVM's
PyTorch-mixing ``BasePyModule`` (which TuneFarm does not use). That makes every
``import tvm`` cost 2.3 s of a core instead of 0.7 s here, in every process that imports
TVM: the driver, each build worker and its sandbox child, each device runner and search
actor. A tuning job starts about five such processes on a 2-core machine before its first
candidate is built.

:func:`install` adds an import hook that, while the ``tvm`` package (or ``tvm_ffi`` alone) is
being executed and only if ``torch`` is not imported yet, makes ``import torch`` fail as if
it were not installed; both handle that case themselves. Once ``tvm`` is loaded the hook is
gone and ``import torch`` works as usual (TuneFarm's torch frontend imports it later, and
torch tensors still reach TVM through the standard ``__dlpack__`` protocol).
``TUNEFARM_TVM_IMPORTS_TORCH=1`` turns the hook off.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGETS = ("tvm", "tvm_ffi")  # the hook goes once the first is found
BLOCKED = "torch"
_lock = threading.Lock()


class _TorchlessLoader(importlib.abc.Loader):
    """Runs the wrapped loader with ``torch`` unimportable (when it is not loaded yet)."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        blocked = BLOCKED not in sys.modules
        if blocked:
            sys.modules[BLOCKED] = None  # type: ignore[assignment]  # `import torch` raises
        try:
            self.inner.exec_module(module)
        finally:
            if blocked and sys.modules.get(BLOCKED, ...) is None:
                del sys.modules[BLOCKED]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``tvm`` (and ``tvm_ffi``) as the other finders would, with the loader wrapped."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in TARGETS:
            return None
        if fullname == TARGETS[0]:
            uninstall()
        for finder in sys.meta_path:
            if isinstance(finder, _Finder):
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TorchlessLoader(spec.loader)  # type: ignore[arg-type]
                return spec
        return None


def _installed() -> list[Any]:
    return [f for f in sys.meta_path if isinstance(f, _Finder)]


def install() -> bool:
    """Add the hook unless TVM is already imported, torch is, or the environment opts out.
    Returns whether the hook is in place."""
    if os.environ.get("TUNEFARM_TVM_IMPORTS_TORCH") == "1":
        return False
    with _lock:
        if TARGETS[0] in sys.modules or BLOCKED in sys.modules:
            return False
        if not _installed():
            sys.meta_path.insert(0, _Finder())
        return True


def uninstall() -> None:
    """Remove the hook (``tvm`` is being imported, or the caller wants torch with it)."""
    with _lock:
        for finder in _installed():
            sys.meta_path.remove(finder)


__all__ = ["install", "uninstall"]
