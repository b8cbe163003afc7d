"""What every benchmark shares: statistics of repeated timings and the machine header and path
of a results file.

Light on purpose: the baseline process (:mod:`benchmarks.baseline`) imports it and must never
import tvm.
"""

from __future__ import annotations

import datetime as dt
import math
import platform
import socket
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- statistics
def stat(samples: list[float]) -> dict[str, Any]:
    """Median, relative spread ((max - min) / median), count and minimum of repeated timings."""
    med = statistics.median(samples)
    spread = (max(samples) - min(samples)) / med if med > 0 else 0.0
    return {"median": med, "spread": spread, "n": len(samples), "min": min(samples)}


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the values that are set and non-zero; None when there are none."""
    kept = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else None


# --------------------------------------------------------------------------- results files
def machine_header() -> dict[str, Any]:
    """The ``machine`` entry of every results file: ``hostname`` (the computer's name),
    ``cpu`` (:func:`workers.fingerprint.cpu_fingerprint`: model, ISA, cores), ``platform``
    and ``python``. Read old files' entries with :func:`hostname_of` and :func:`cpu_of`."""
    from workers.fingerprint import cpu_fingerprint

    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_fingerprint(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def hostname_of(machine: Any) -> str | None:
    """The hostname in a results file's ``machine`` entry; the suite's older files named it
    ``host`` (older single-benchmark files held the CPU string alone, no hostname)."""
    if isinstance(machine, dict):
        return machine.get("hostname") or machine.get("host")
    return None


def cpu_of(machine: Any) -> str | None:
    """The CPU in a results file's ``machine`` entry: older files held the CPU string alone."""
    if isinstance(machine, dict):
        return machine.get("cpu")
    return machine if isinstance(machine, str) else None


def results_path(kind: str | None = None) -> Path:
    """``benchmarks/results/<date>-<hostname>[-<kind>].json``, where a run writes its results."""
    suffix = f"-{kind}" if kind else ""
    return RESULTS / f"{dt.date.today()}-{socket.gethostname()}{suffix}.json"
