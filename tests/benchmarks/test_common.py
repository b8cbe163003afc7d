"""benchmarks.common: the statistics and the results-file header every benchmark shares."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

from benchmarks.common import (
    cpu_of,
    geomean,
    hostname_of,
    machine_header,
    results_path,
    stat,
)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_stat_and_geomean() -> None:
    assert stat([3.0, 1.0, 2.0]) == {"median": 2.0, "spread": 1.0, "n": 3, "min": 1.0}
    assert stat([0.0, 0.0])["spread"] == 0.0
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean(v for v in (2.0, None, 0.0, 8.0)) == pytest.approx(4.0)  # unset: left out
    assert geomean([]) is None


def test_header_names_hostname_and_cpu() -> None:
    header = machine_header()
    assert header["hostname"] == socket.gethostname() and "host" not in header
    assert header["cpu"] and header["platform"] and header["python"]
    assert hostname_of(header) == header["hostname"] and cpu_of(header) == header["cpu"]
    assert results_path("models").name.endswith(f"-{socket.gethostname()}-models.json")
    assert results_path().name.endswith(f"-{socket.gethostname()}.json")


def test_old_results_files_still_read() -> None:
    """The suite's files said ``host`` for the hostname; single benchmarks wrote the CPU
    string alone as ``machine``."""
    suite = json.loads((RESULTS / "2026-11-22-vm.json").read_text())["machine"]
    assert hostname_of(suite) == "vm" and cpu_of(suite) == suite["cpu"]
    symbolic = json.loads((RESULTS / "2026-11-23-vm-symbolic-mlp.json").read_text())["machine"]
    assert hostname_of(symbolic) is None and cpu_of(symbolic).startswith("AMD EPYC")
    assert hostname_of(None) is None and cpu_of(None) is None


# spins until it has used SEC seconds of a core (CPU time, not wall time: on a busy machine
# the child gets less than a core, but it always does the same work)
BUSY = "import time\nwhile time.process_time() < {sec}: pass\n"


def _proc_cpu_sec(pid: int) -> float:
    """CPU time (user + system) a running process has used, from /proc/PID/stat."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


TICK = 0.05  # /proc's clock ticks and rusage's accounting differ by a few 10 ms ticks


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs /proc/stat")
def test_foreign_load_counts_other_processes_not_the_steps_own() -> None:
    """A step's own subprocesses are its work; a process it does not wait for is another's.
    Asserted on CPU time that is known whatever else the machine runs: the step's child used
    0.6 s of a core, which the foreign figure leaves out of the machine's busy time; a spinning
    process it did not start is counted for every tick it ran."""
    import subprocess

    from benchmarks.common import _cpu_sec, foreign_load

    before = _cpu_sec()
    with foreign_load() as own:
        subprocess.run([sys.executable, "-c", BUSY.format(sec=0.6)], check=True)
    after = _cpu_sec()
    assert before is not None and after is not None and own.cores is not None
    machine = after[0] - before[0]  # every process's CPU over (a little more than) the step
    assert own.cores * own.wall_sec <= machine - 0.6 + TICK  # the child's 0.6 s left out
    assert own.steal is not None and own.steal >= 0  # the hypervisor's, apart
    other = subprocess.Popen([sys.executable, "-c", BUSY.format(sec=30.0)])
    try:
        time.sleep(0.3)  # started and spinning
        start = _proc_cpu_sec(other.pid)
        with foreign_load() as busy:
            time.sleep(0.8)
        ran = _proc_cpu_sec(other.pid) - start
        assert busy.cores is not None and busy.cores * busy.wall_sec >= ran - TICK
        assert ran > 0.05 and busy.disturbed  # it ran at all: the step was disturbed
    finally:
        other.kill()
        other.wait()


def test_the_hypervisors_steal_disturbs_a_step_as_other_processes_do() -> None:
    from benchmarks.common import DISTURBED_CORES, ForeignLoad, disturbed

    assert not disturbed(None) and not disturbed(0.01, 0.01)
    assert disturbed(DISTURBED_CORES * 2) and disturbed(0.01, DISTURBED_CORES * 2)
    assert ForeignLoad(1.0, cores=0.0, steal=0.3).disturbed
