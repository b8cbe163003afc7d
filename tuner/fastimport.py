"""Fast import of TVM's tensor-intrinsic registry.

``tvm.s_tir.tensor_intrin`` parses hundreds of TVMScript functions; each parse calls
``inspect.stack()``, which resolves the module of every frame by scanning ``sys.modules``
(import frames never hit its cache). That costs ~40 s of a core per process. MetaSchedule's
``TuneContext`` imports the registry, so every tuning process paid it. During that one import we
swap in a stack walker that reads source lines straight from ``linecache``: the same frames,
file names, line numbers and code context, without the module scan.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import linecache
import sys
import threading
import types
from collections.abc import Iterator
from types import FrameType
from typing import Any

_lock = threading.Lock()


def _frame_infos(frame: FrameType | None, context: int) -> list[inspect.FrameInfo]:
    out = []
    while frame is not None:
        code = frame.f_code
        lineno = frame.f_lineno or code.co_firstlineno
        lines: list[str] | None = None
        index: int | None = None
        if context > 0:
            start = max(1, lineno - context // 2)
            lines = [linecache.getline(code.co_filename, n) for n in range(start, start + context)]
            if not any(lines):
                lines = None
            else:
                index = lineno - start
        out.append(inspect.FrameInfo(frame, code.co_filename, lineno, code.co_name, lines, index))
        frame = frame.f_back
    return out


def _fast_stack(context: int = 1) -> list[inspect.FrameInfo]:
    return _frame_infos(sys._getframe(1), context)


def _fast_getouterframes(frame: FrameType, context: int = 1) -> list[inspect.FrameInfo]:
    return _frame_infos(frame, context)


@contextlib.contextmanager
def fast_inspect_stack() -> Iterator[None]:
    """Within the block, ``inspect.stack``/``getouterframes`` skip the ``sys.modules`` scan."""
    with _lock:
        saved = inspect.stack, inspect.getouterframes
        inspect.stack, inspect.getouterframes = _fast_stack, _fast_getouterframes  # type: ignore[assignment]
        try:
            yield
        finally:
            inspect.stack, inspect.getouterframes = saved  # type: ignore[assignment]


PACKAGE = "tvm.s_tir.tensor_intrin"
GPU_ONLY = f"{PACKAGE}.cuda"  # its ~250 TVMScript parses are most of the registry's cost
CPU_KINDS = ("llvm", "c")


def preload_tensor_intrin(target: Any = None) -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (once per process) the fast way.

    For a CPU ``target`` (kind ``llvm`` or ``c``) the CUDA intrinsics are left out: a CPU
    search never looks them up, and parsing them is most of the import (1.3 of 1.8 s here).
    Any later import of ``tvm.s_tir.tensor_intrin.cuda`` (a CUDA job, dlight's GPU rules)
    loads them as usual; so does this function for another target or none.
    """
    kind = getattr(getattr(target, "kind", None), "name", None)
    with fast_inspect_stack():
        if PACKAGE not in sys.modules:
            if kind in CPU_KINDS and GPU_ONLY not in sys.modules:
                # the package's __init__ runs `from . import cuda`: give it a placeholder
                placeholder = sys.modules[GPU_ONLY] = types.ModuleType(GPU_ONLY)
                try:
                    importlib.import_module(PACKAGE)
                finally:
                    del sys.modules[GPU_ONLY]
                    package = sys.modules.get(PACKAGE)
                    if getattr(package, "cuda", None) is placeholder:
                        delattr(package, "cuda")
                return
            importlib.import_module(PACKAGE)
        if kind not in CPU_KINDS:
            importlib.import_module(GPU_ONLY)


def prepare_stock_builder() -> None:
    """Initializer of a stock MetaSchedule ``LocalBuilder`` that TuneFarm's benchmarks compare
    against: the tensor-intrinsic registry (:func:`preload_tensor_intrin`) and the erf/tanh/pow
    lowering (:mod:`workers.fast_math`) that TuneFarm's builders, ``tunefarm build`` and the
    benchmarks' re-timing compile with. Without it stock tunes other code than it is judged by:
    its builder processes lower ``erf`` to libm's scalar ``erff`` (the MLP's GELU kernel 4-6x
    slower), so its measurements and its search see a kernel nobody ships."""
    from workers import fast_math

    fast_math.install()
    preload_tensor_intrin()
