"""Checks a command makes before any work: its arguments, its input and output files.

Light on purpose: each runs before TVM, torch, ONNX or Ray is imported, so a bad argument or
a file that is not a model is answered at once, in one line.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

from tuner.errors import TuneFarmError
from tuner.modelfile import check_model_file, protobuf_defect  # noqa: F401


def check_output_file(path: Path, flag: str) -> None:
    """An output file the command can write (``flag`` names the option in the error)."""
    if path.is_dir():
        raise TuneFarmError(f"{flag} {path} is a directory: give a file path")
    folder = path.parent
    if not folder.is_dir():
        raise TuneFarmError(f"{flag} {path}: folder does not exist: {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise TuneFarmError(f"{flag} {path}: not writable")


# the suffix a shared library has on this platform (what the Relax VM loads)
LIBRARY_SUFFIX = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")


def check_library_output(path: Path, flag: str = "--output") -> None:
    """A path for a compiled library: writable and named with the platform's suffix."""
    check_output_file(path, flag)
    if path.suffix != LIBRARY_SUFFIX:
        raise TuneFarmError(
            f"{flag} {path}: a compiled library is named *{LIBRARY_SUFFIX} on this platform "
            f"(e.g. {path.with_suffix(LIBRARY_SUFFIX).name})"
        )


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(flag: str, text: str | None) -> float | None:
    """Seconds from ``90``, ``90s``, ``2.5m``, ``1h`` or ``1h30m`` (None stays None)."""
    if text is None:
        return None
    number = r"\s*(\d+(?:\.\d+)?)\s*"
    low = text.lower()
    if re.fullmatch(number, low):
        total = float(low)
    elif re.fullmatch(f"(?:{number}[smh])+\\s*", low):
        total = sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(f"{number}([smh])", low))
    else:
        total = 0.0
    if not 0 < total < math.inf:
        raise TuneFarmError(
            f"{flag} must be a positive duration like 90s, 10m or 1h30m (got {text!r})"
        )
    return total


def check_range(flag: str, value: float | None, low: float, high: float) -> None:
    """``value`` is None or a finite number in [low, high]."""
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise TuneFarmError(f"{flag} must be between {low:g} and {high:g} (got {value})")
