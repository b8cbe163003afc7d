"""benchmarks.common: the statistics and the results-file header every benchmark shares."""

from __future__ import annotations

import json
import socket
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
