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
import inspect
import linecache
import sys
import threading
from collections.abc import Iterator
from types import FrameType

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


def preload_tensor_intrin() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (once per process) the fast way."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    with fast_inspect_stack():
        import tvm.s_tir.tensor_intrin  # noqa: F401
