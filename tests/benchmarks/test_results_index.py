"""benchmarks/results/INDEX.md against the results folder and the docs that cite it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from benchmarks.results_index import (
    ROOT,
    benchmark_and_command,
    citations,
    host_cpu,
    indexed_names,
    problems,
    render,
    results_files,
)

RESULTS = ROOT / "benchmarks" / "results"


def test_every_results_file_has_a_row_and_every_row_a_file() -> None:
    files = set(results_files(RESULTS))
    rows = indexed_names(RESULTS / "INDEX.md")
    assert files, "no results files"
    assert not files - set(rows), f"files without a row in INDEX.md: {sorted(files - set(rows))}"
    assert not set(rows) - files, f"rows naming missing files: {sorted(set(rows) - files)}"
    assert len(rows) == len(set(rows)), "a file has two rows"


def test_docs_link_only_results_that_exist() -> None:
    files = set(results_files(RESULTS))
    missing = {n: w for n, w in citations(ROOT).items() if n not in files}
    assert not missing, f"docs link results files that do not exist: {missing}"


def test_every_results_file_backs_a_claim() -> None:
    cited = citations(ROOT)
    uncited = [n for n in results_files(RESULTS) if n not in cited]
    assert not uncited, f"results files no README/docs line cites (git rm them): {uncited}"


def _tree(tmp_path: Path) -> Path:
    """A checkout-like tree: README, one doc, a results folder with two files."""
    (tmp_path / "docs").mkdir()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    machine = {"hostname": "vm", "cpu": "AMD EPYC | x86_64 | avx2 | 2 cores"}
    ttq = {"date": "2026-12-02T04:12:41+0000", "machine": machine, "seeds": 5}
    ttq |= {"trials_per_task": 64, "budget": "wall", "workloads": {"mlp": {}}}
    (results / "2026-12-02-vm-time-to-quality-mlp.json").write_text(json.dumps(ttq))
    (results / "2026-12-02-vm-time-to-quality-mlp-mlp.png").write_bytes(b"\x89PNG")
    (tmp_path / "README.md").write_text(
        "[x](benchmarks/results/2026-12-02-vm-time-to-quality-mlp.json)\n"
    )
    (tmp_path / "docs" / "t.md").write_text(
        "![c](../benchmarks/results/2026-12-02-vm-time-to-quality-mlp-mlp.png)\n"
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_index_rows_name_benchmark_command_cpu_and_citing_line(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "benchmarks" / "results" / "INDEX.md").write_text(render(root))
    assert problems(root) == []
    text = (root / "benchmarks" / "results" / "INDEX.md").read_text()
    row = next(line for line in text.splitlines() if "mlp.json`" in line)
    assert "time to quality" in row and "2026-12-02" in row and "AMD EPYC" in row
    assert "--workloads mlp --seeds 5 --trials-per-task 64 --budget wall" in row
    assert "README.md:1" in row and "not committed yet" in row
    png = next(line for line in text.splitlines() if "mlp-mlp.png`" in line)
    assert "(plot)" in png and "docs/t.md:1" in png and "AMD EPYC" in png


def test_problems_name_each_kind_of_fault(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    results = root / "benchmarks" / "results"
    (results / "INDEX.md").write_text(render(root))
    shutil.copy(results / "2026-12-02-vm-time-to-quality-mlp.json", results / "2026-12-03-x.json")
    (root / "docs" / "t.md").write_text("see benchmarks/results/2026-01-01-gone.json\n")
    found = problems(root)
    assert "2026-12-03-x.json: no row in INDEX.md" in found
    assert "docs/t.md:1: links 2026-01-01-gone.json, which does not exist" in found
    assert "2026-12-02-vm-time-to-quality-mlp-mlp.png: cited by no doc" in found
    (results / "2026-12-03-x.json").unlink()
    (results / "2026-12-02-vm-time-to-quality-mlp-mlp.png").unlink()
    assert (
        "2026-12-02-vm-time-to-quality-mlp-mlp.png: INDEX.md row names a missing file"
        in problems(root)
    )


def test_host_cpu_and_commands_from_the_fingerprints() -> None:
    assert host_cpu({"machine": {"cpu": "Xeon | x86_64"}}) == "Xeon / x86_64"
    assert host_cpu({"machine": "AMD EPYC | 2 cores"}) == "AMD EPYC / 2 cores"
    assert host_cpu({"device": "NVIDIA H200 | sm_90"}) == "NVIDIA H200 / sm_90"
    assert host_cpu({"results": []}) == "not recorded"
    bench, cmd = benchmark_and_command(
        "2026-12-01-vm-planner-mlp.json",
        {"trials": 64, "seeds": [0, 1, 2], "cases": [{"model": "examples/mlp_dynamic.py"}]},
    )
    assert bench == "bucket planner"
    assert cmd == "python -m benchmarks planner --models mlp --trials 64 --seeds 0 1 2"


def test_decoder_command_reads_trials_threads_and_name() -> None:
    name = "2026-12-05-vm-decoder-64.json"
    data = {"trials": 64, "threads": [1]}
    assert benchmark_and_command(name, data) == (
        "decoder bench",
        "python -m benchmarks decoder --trials 64 --threads 1 --name decoder-64",
    )
    assert benchmark_and_command(name, {"trials": 256, "threads": [1, 2]})[1] == (
        "python -m benchmarks decoder --name decoder-64"  # the defaults
    )
    assert benchmark_and_command("2026-12-05-vm-decoder.json", {}) == (
        "decoder bench",
        "python -m benchmarks decoder",
    )
