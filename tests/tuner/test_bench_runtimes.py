"""``tunefarm bench`` beside the runtimes users pick instead: real ``torch.compile`` (inductor,
CPU) and real ONNX Runtime (CPU EP, on the ``torch.onnx.export`` of a ``.pt2`` or on an
``.onnx`` file), outputs checked against the reference, and one-line reasons where a runtime
cannot run (not installed, an export that really fails)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database import Storage, TuneFarmDatabase
from tests.cli_assert import one_line_error
from tuner.bench.results import BenchResult, Paired, RuntimeResult, runtime_notes
from tuner.bench.run import bench
from tuner.bench.runtimes import runtimes_for
from tuner.cli import app
from tuner.cli.render import runtimes_table
from tuner.model import load_model

ROOT = Path(__file__).resolve().parents[2]
ONNX_MLP = ROOT / "examples" / "mlp_batch.onnx"
TINY = ROOT / "tests" / "data" / "tiny_matmul.py"
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Linear -> ReLU -> Linear on x[n, 16], n a Dim (1..64), through tunefarm's export."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from tuner.frontends.torch import export

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    path = tmp_path_factory.mktemp("rt") / "tiny.pt2"
    export(net.eval(), (torch.randn(4, 16),), path, dynamic_shapes=({0: Dim("n", max=64)},))
    return path


@pytest.fixture(scope="module")
def cumprod_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``cumprod``: TVM imports it, torch.onnx.export has no ONNX function for it (a real
    export failure)."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    class CumProd(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumprod(x, dim=1)

    from tuner.frontends.torch import export

    path = tmp_path_factory.mktemp("rt") / "cumprod.pt2"
    export(CumProd(), (torch.randn(2, 8),), path, dynamic_shapes=({1: Dim("s", min=2, max=64)},))
    return path


def _runtime_notes(results: list[BenchResult]) -> list[str]:
    """The notes but the one on noise (the test machine may be busy)."""
    return [n for n in runtime_notes(results) if not n.startswith("noisy:")]


@pytest.fixture
def db(tmp_path: Path) -> TuneFarmDatabase:
    return TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'rt.db'}"))


@pytest.mark.slow
def test_pt2_torch_compile_and_onnxruntime_beside_tuned(tiny_pt2: Path, db, llvm_target) -> None:
    pytest.importorskip("onnxruntime")
    model = load_model(tiny_pt2)
    assert runtimes_for(model) == ("torch.compile", "onnxruntime")
    results = bench(model, llvm_target, db, [{"n": 1}, {"n": 9}, {"n": 64}], repeat=3)
    assert [r.shape["n"] for r in results] == [1, 9, 64]
    for r in results:
        assert r.agree and r.reference == "pytorch" and r.reference_sec > 0
        assert r.threads and r.threads >= 1
        assert set(r.spread) == {"tuned", "untuned", "reference"}
        assert [rt.name for rt in r.runtimes] == ["torch.compile", "onnxruntime"]
        for rt in r.runtimes:
            assert rt.ok and rt.agree, rt
            assert rt.sec > 0 and rt.warmup_sec is not None and rt.setup_sec is not None
            assert rt.max_abs_err < 1e-4 and rt.spread is not None
            # the ratio reported is the median of rounds timing it back to back with tuned
            p = r.paired[rt.name]
            assert r.vs_runtime(rt.name) == p.ratio > 0 and p.spread >= 0
            assert p.sec > 0 and p.tuned_sec > 0
        assert r.vs_reference == r.paired["pytorch"].ratio > 0
    # the JSON of a result carries every runtime's figures
    data = json.loads(json.dumps(results[1].to_dict()))
    ort = data["runtimes"]["onnxruntime"]
    assert ort["sec"] > 0 and ort["agree"] is True and ort["error"] is None
    assert data["runtimes"]["torch.compile"]["tuned_speedup"] > 0
    notes = _runtime_notes(results)
    assert any(n.startswith("torch.compile: warm-up (compilation)") for n in notes), notes
    assert not any("MISMATCH" in n or "not run" in n for n in notes), notes
    assert data["spread"]["tuned"] >= 0 and data["runtimes"]["onnxruntime"]["spread"] >= 0
    assert (
        data["runtimes"]["onnxruntime"]["tuned_speedup"] == data["paired"]["onnxruntime"]["ratio"]
    )


@pytest.mark.slow
def test_onnx_export_that_fails_is_one_line(cumprod_pt2: Path, db, llvm_target) -> None:
    """torch.onnx.export has no ONNX function for cumprod's prims.prod: ORT is not run, the
    reason is torch's own root cause in one line; TuneFarm's figures are still there."""
    pytest.importorskip("onnxruntime")
    model = load_model(cumprod_pt2)
    results = bench(model, llvm_target, db, [{"s": 4}, {"s": 16}], runtimes=["onnxruntime"])
    for r in results:
        assert r.agree and r.tuned_sec > 0
        (rt,) = r.runtimes
        assert rt.sec is None and not rt.ok
        assert rt.error.startswith("torch.onnx.export failed: DispatchError: No ONNX function")
        assert "prims.prod" in rt.error and "\n" not in rt.error
    (note,) = _runtime_notes(results)
    assert note.startswith("onnxruntime: not run: torch.onnx.export failed")


@pytest.mark.slow
def test_onnxruntime_not_installed(tiny_pt2: Path, db, llvm_target, monkeypatch) -> None:
    """onnxruntime not importable (as without the ort extra): not run, the extra named."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    model = load_model(tiny_pt2)
    (r,) = bench(model, llvm_target, db, [{"n": 8}], runtimes=["onnxruntime"])
    (rt,) = r.runtimes
    assert rt.error == "not installed: pip install 'tunefarm[ort]'" and rt.sec is None
    assert _runtime_notes([r]) == [
        "onnxruntime: not run: not installed: pip install 'tunefarm[ort]'"
    ]
    assert r.to_dict()["runtimes"]["onnxruntime"]["tuned_speedup"] is None


def test_onnx_file_runs_in_onnxruntime(db, llvm_target) -> None:
    """An .onnx model: ORT runs the file itself, checked against the untuned build."""
    pytest.importorskip("onnxruntime")
    model = load_model(ONNX_MLP)
    assert runtimes_for(model) == ("onnxruntime",)
    results = bench(model, llvm_target, db, [{"batch": 1}, {"batch": 40}], repeat=3)
    for r in results:
        (rt,) = r.runtimes
        assert r.reference == "untuned" and rt.ok and rt.agree and rt.setup_sec is not None


def test_tvmscript_model_has_no_other_runtime(db, llvm_target) -> None:
    model = load_model(TINY)
    assert runtimes_for(model) == ()
    (r,) = bench(model, llvm_target, db, runtimes=["torch.compile"], repeat=3)
    (rt,) = r.runtimes
    assert rt.error == "runs .pt2 models only"


def _result(agree: bool) -> BenchResult:
    return BenchResult(
        untuned_sec=2e-3,
        tuned_sec=1e-3,
        numpy_sec=None,
        max_abs_err=0.0,
        reference="pytorch",
        agree=True,
        tuned_share=1.0,
        untuned_kernels=[],
        shape={"s": 8},
        kernels={},
        reference_sec=3e-3,
        runtimes=(
            RuntimeResult(
                "torch.compile", sec=5e-4, max_abs_err=0.5, agree=agree, warmup_sec=2.0, spread=0.6
            ),
            RuntimeResult("onnxruntime", error="not installed: pip install 'tunefarm[ort]'"),
        ),
        threads=2,
        spread={"tuned": 0.01, "untuned": 0.02, "reference": 0.03},
        paired={"pytorch": Paired(2.5, 0.4, 3e-3, 1.2e-3)},
    )


def test_table_marks_a_mismatch_and_a_runtime_not_run() -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(runtimes_table([_result(agree=False)], "m.pt2"))
    text = console.export_text()
    assert "pytorch eager" in text and "2 threads each" in text
    row = next(line for line in text.splitlines() if "s=8" in line)
    # the reference's ratio is its paired one (2.50x, not 3.000 / 1.000), marked noisy by
    # the rounds' spread although its time's repeats held still
    assert "500.0 µs (0.50x) noisy MISMATCH" in row and "3.000 ms (2.50x) noisy │" in row
    assert "not run" in row
    notes = runtime_notes([_result(agree=False)])
    assert "torch.compile: output MISMATCH against the reference at s=8 (max err 5.0e-01)" in notes
    assert "onnxruntime: not run: not installed: pip install 'tunefarm[ort]'" in notes
    assert notes[-1].startswith("noisy: 2 figure(s) spread by more than 25% over the repeats")
    assert "torch.compile@s=8" in notes[-1] and "pytorch/tuned@s=8" in notes[-1]
    assert runtimes_table([_result(agree=True)], "m.pt2") is not None
    console = Console(width=200, record=True)
    console.print(runtimes_table([_result(agree=True)], "m.pt2"))
    assert "MISMATCH" not in console.export_text()


@pytest.mark.slow
def test_cli_runtimes_option(tiny_pt2: Path, cumprod_pt2: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    Storage(url).dispose()  # bench reads an existing database
    db = ["--db", url]
    result = runner.invoke(app, ["bench", str(tiny_pt2), "--runtimes", "tvm", *db])
    one_line_error(result, "--runtimes: unknown runtime(s) tvm")
    result = runner.invoke(
        app, ["bench", str(tiny_pt2), "--shape", "n=4", "--runtimes", "none", *db]
    )
    assert result.exit_code == 0, result.output
    assert "side by side" not in result.output
    # an export that fails: one line in the output, no traceback, exit 0 (TuneFarm agrees)
    js = tmp_path / "b.json"
    args = ["bench", str(cumprod_pt2), "--shape", "s=8", "--runtimes", "onnxruntime"]
    result = runner.invoke(app, [*args, *db, "-o", str(js)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "side by side" in result.output
    assert "onnxruntime: not run: torch.onnx.export failed: DispatchError" in " ".join(
        result.output.split()
    )
    (row,) = json.loads(js.read_text())["results"]
    assert row["runtimes"]["onnxruntime"]["error"].startswith("torch.onnx.export failed")
