"""What every benchmark shares: statistics of repeated timings and the machine header and path
of a results file.

Light on purpose: the baseline process (:mod:`benchmarks.baseline`) imports it and must never
import tvm.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import resource
import socket
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


# --------------------------------------------------------------------------- other load
# other processes' CPU (cores, averaged over a step) above which the step is marked disturbed
# (a few seconds of planner runs, niced, beside a 50 s bench of the transformer block made
# its traffic mean read 309 us where three quiet re-runs read 52-55 us: with 2 TVM threads on
# 2 cores any other runnable process stalls every parallel kernel's barrier)
DISTURBED_CORES = 0.05


@dataclass
class ForeignLoad:
    """What else used the CPUs while a step ran, in cores on average: ``cores``, the other
    processes (the machine's busy time in ``/proc/stat`` less this process's and its
    waited-for children's), and ``steal``, the hypervisor's (time a virtual CPU was ready to
    run and another guest ran instead). Either stalls a parallel kernel's barrier alike."""

    wall_sec: float = 0.0
    cores: float | None = None  # None: not measurable here (no /proc/stat)
    steal: float | None = None

    @property
    def disturbed(self) -> bool:
        return disturbed(self.cores, self.steal)


def disturbed(cores: float | None, steal: float | None = None) -> bool:
    """Whether a step beside ``cores`` of other processes' CPU and ``steal`` cores taken by
    the hypervisor measured that work too."""
    return (cores or 0.0) + (steal or 0.0) > DISTURBED_CORES


def _cpu_sec() -> tuple[float, float] | None:
    """The machine's CPU time since boot (all cores): busy in this guest, and stolen by the
    hypervisor; None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    fields += [0] * (8 - len(fields))
    idle = fields[3] + fields[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields[:7]) - idle) / tick, fields[7] / tick  # user..softirq, steal


def _own_sec() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def foreign_load() -> Iterator[ForeignLoad]:
    """Measure the other processes' CPU time over the ``with`` block (its subprocesses must
    have been waited for by its end, as ``subprocess.run`` does)."""
    out = ForeignLoad()
    cpu0, own0, t0 = _cpu_sec(), _own_sec(), time.perf_counter()
    try:
        yield out
    finally:
        cpu1, out.wall_sec = _cpu_sec(), time.perf_counter() - t0
        if cpu0 is not None and cpu1 is not None and out.wall_sec > 0:
            other = (cpu1[0] - cpu0[0]) - (_own_sec() - own0)
            out.cores = max(0.0, other) / out.wall_sec
            out.steal = max(0.0, cpu1[1] - cpu0[1]) / out.wall_sec


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
