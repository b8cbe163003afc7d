"""What a newcomer trips on (issue 63's table): where local jobs are, range errors before any
work, bad model files answered before the heavy imports, bench's ratios, one ``--json``
convention, ``-h`` everywhere, a library's name. No Ray, no tuning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.cli_assert import one_line_error
from tests.conftest import TINY
from tests.ray_processes import free_port
from tuner.bench.results import BenchResult, Paired
from tuner.cli import app
from tuner.cli.checks import protobuf_defect
from tuner.cli.render import bench_table, print_bench
from tuner.services import BenchReport

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_jobs_without_a_cluster_names_the_local_jobs() -> None:
    result = runner.invoke(app, ["jobs", "--address", f"http://127.0.0.1:{free_port()}"])
    one_line_error(result, "cannot reach the Ray cluster's dashboard")
    assert "tunefarm db list --jobs" in result.output


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--seed", "-7"], "--seed must be 0 or more (got -7)"),
        (["--seed", str(2**40)], "--seed must be at most 2,147,483,647"),
        (["--trials", "0"], "--trials must be at least 1 (got 0)"),
        (["--trials", str(10**23)], "--trials must be at most 1,000,000"),
        (["--per-iter", str(10**23)], "--per-iter must be at most 1,000,000"),
    ],
)
@pytest.mark.parametrize("command", ["tune", "submit"])
def test_range_errors_before_anything_starts(
    command: str, option: list[str], needle: str, tmp_path: Path
) -> None:
    db = tmp_path / "tf.db"
    result = runner.invoke(app, [command, str(TINY), *option, "--db", f"sqlite:///{db}"])
    one_line_error(result, needle)
    assert not db.exists()  # no database opened, no job row left behind


def test_a_number_that_is_not_an_integer_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "tf.db"
    result = runner.invoke(app, ["tune", str(TINY), "--trials", "1e23", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2 and "Invalid value for '--trials'" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not db.exists()


@pytest.fixture
def bad_models(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for suffix in (".pt2", ".onnx"):
        path = tmp_path / f"garbage{suffix}"
        path.write_bytes(b"\xff\xfe garbage, not a model \x00" * 4)
        out[suffix] = path
    return out


def test_bad_model_files_are_refused_by_their_container(bad_models: dict[str, Path]) -> None:
    for command in (
        ["tune"],
        ["bench"],
        ["build", "-o", str(bad_models[".pt2"].with_suffix(".so"))],
    ):
        for suffix, why in ((".pt2", "not a zip archive"), (".onnx", "not a protobuf message")):
            result = runner.invoke(app, [*command, str(bad_models[suffix])])
            one_line_error(result, why)
    # the real files pass the same checks
    assert protobuf_defect(ROOT / "examples" / "mlp_batch.onnx") is None
    empty = bad_models[".onnx"].with_name("empty.onnx")
    empty.write_bytes(b"")
    assert protobuf_defect(empty) == "the file is empty: it holds no ONNX graph"


CHECK_IMPORTS = """
import sys
from tuner.cli.app import app
for args in {cases!r}:
    try:
        app(args)
    except SystemExit as exit:
        assert exit.code in (1, 2), (args, exit.code)
print(sorted(m for m in ("tvm", "torch", "onnx", "ray") if m in sys.modules))
"""


@pytest.mark.slow  # a subprocess: the imports of a fresh process
def test_argument_and_file_errors_come_before_the_heavy_imports(
    bad_models: dict[str, Path], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'tf.db'}"
    cases = [
        ["tune", str(bad_models[".pt2"]), "--db", db],
        ["tune", str(bad_models[".onnx"]), "--db", db],
        ["bench", str(bad_models[".pt2"]), "--db", db],
        ["tune", str(TINY), "--trials", "0", "--db", db],
        ["tune", str(TINY), "--seed", "-7", "--db", db],
        ["submit", str(TINY), "--trials", str(10**23)],
        ["build", str(TINY), "-o", str(tmp_path / "x.txt"), "--db", db],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS.format(cases=cases)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout  # none of them imported
    assert proc.stderr.count("error:") == len(cases) and "Traceback" not in proc.stderr


def test_bench_table_ratios_are_those_of_its_columns() -> None:
    """numpy 284 us beside tuned 100 us reads 2.84x, whatever the paired rounds said."""
    result = BenchResult(
        untuned_sec=300e-6,
        tuned_sec=100e-6,
        numpy_sec=284e-6,
        max_abs_err=0.0,
        reference="numpy",
        agree=True,
        tuned_share=1.0,
        untuned_kernels=[],
        shape={"n": 32},
        kernels={},
        reference_sec=284e-6,
        paired={"numpy": Paired(ratio=1.35, spread=0.1, sec=135e-6, tuned_sec=100e-6)},
    )
    report = BenchReport("m.py", "llvm", "numpy", (result,))
    console = Console(record=True, width=200)
    console.print(bench_table(report))
    text = console.export_text()
    assert "2.84x" in text and "1.35x" not in text
    assert "3.00x" in text  # untuned / tuned
    assert "numpy / tuned, of the times printed" in text
    console = Console(record=True, width=200)
    print_bench(console, report)  # the paired ratio on a line of its own, named as such
    assert "numpy / tuned in rounds timing the two back to back (median): n=32 1.35x" in (
        console.export_text()
    )


def test_every_command_takes_h_and_no_flag_shows_a_bool_metavar() -> None:
    import typer

    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]
    seen = 0
    while paths:
        path = paths.pop()
        result = runner.invoke(app, [*path, "-h"])
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, path
        seen += 1
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        for name, sub in getattr(cmd, "commands", {}).items():
            if not sub.hidden:
                paths.append([*path, name])
    assert seen > 25


def test_one_json_convention(tmp_path: Path) -> None:
    """``--json`` is a flag printing JSON on stdout everywhere; bench writes a file with
    ``-o/--output``."""
    for command in (["tune"], ["build"], ["bench"], ["plan"], ["db", "list"], ["jobs"]):
        help_text = runner.invoke(app, [*command, "-h"]).output
        line = next(x for x in help_text.splitlines() if "--json" in x)
        assert "<path>" not in line and "<str>" not in line, (command, line)
    bench_help = runner.invoke(app, ["bench", "-h"]).output
    assert "--output" in bench_help and "-o" in bench_help


def test_build_refuses_a_library_name_without_the_suffix(tmp_path: Path) -> None:
    out = tmp_path / "x.txt"
    result = runner.invoke(app, ["build", str(TINY), "-o", str(out)])
    one_line_error(result, "a compiled library is named *.so")
    assert "x.so" in result.output and not out.exists()


def test_bench_json_to_a_file_and_stdout_agree(tmp_path: Path, sqlite_url: str) -> None:
    from database import Storage

    Storage(sqlite_url).dispose()
    out = tmp_path / "bench.json"
    args = ["bench", str(TINY), "--db", sqlite_url, "--runtimes", "none"]
    result = runner.invoke(app, [*args, "--json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert json.loads(out.read_text()).keys() == printed.keys() == {"results"}
