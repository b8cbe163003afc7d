"""ONNX (.onnx) and torch.export (.pt2) models: import with named symbolic dims, correct builds
at several values of each dim, tuning through the CLI, and one-line errors for bad files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from typer.testing import CliRunner

from database import Storage
from tests.cli_assert import one_line_error
from tuner.bench.timing import random_inputs
from tuner.cli import app
from tuner.compile import compile as tf_compile
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.symbolic.buckets import symbolic_vars, upper_bounds

ROOT = Path(__file__).resolve().parents[2]
ONNX_MLP = ROOT / "examples" / "mlp_batch.onnx"
PT2_ENCODER = ROOT / "examples" / "transformer_encoder.pt2"
runner = CliRunner()


def _run_untuned(model, values: dict[str, int], target) -> tuple[list, list[np.ndarray]]:
    """Inputs at ``values`` and the untuned TVM build's outputs."""
    ex, _ = tf_compile(model.mod, target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = random_inputs(model.mod["main"], values, np.random.default_rng(1), model.num_inputs)
    out = vm["main"](*[tvm.runtime.tensor(a) for a in [*args, *model.params]])
    from tuner.frontends.reference import flat_outputs

    return args, flat_outputs(out)


def _onnx_numpy(path: Path, x: np.ndarray) -> np.ndarray:
    """The example MLP computed in numpy from the file's own initializers."""
    import onnx
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    h = np.maximum(x @ w["w1"] + w["b1"], 0)
    return h @ w["w2"] + w["b2"]


# ---------------------------------------------------------------- ONNX


@pytest.mark.parametrize("keep_params", [False, True])
def test_onnx_import_keeps_dim_param(llvm_target, keep_params: bool) -> None:
    pytest.importorskip("onnx")
    model = load_model(ONNX_MLP, keep_params=keep_params)
    assert symbolic_vars(model.mod) == ["batch"]
    assert model.reference is None  # the untuned build is the reference for ONNX
    assert model.num_inputs == 1
    assert len(model.params) == (4 if keep_params else 0)
    assert len(model.mod["main"].params) == (5 if keep_params else 1)
    ex, _ = tf_compile(model.mod, llvm_target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for batch in (1, 7, 300):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype("float32")
        out = vm["main"](*[tvm.runtime.tensor(a) for a in [x, *model.params]]).numpy()
        np.testing.assert_allclose(out, _onnx_numpy(ONNX_MLP, x), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_onnx_dim_param_names_are_kept(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", "seq.len", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", "seq.len", 8])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert symbolic_vars(load_model(path).mod) == ["batch_size", "seq_len"]
    result = runner.invoke(
        app, ["tune", str(path), "--shape", "batch=4", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    one_line_error(result, "model has batch_size: x axis 0; seq_len: x axis 1")


# ---------------------------------------------------------------- PyTorch


@pytest.mark.slow
@pytest.mark.parametrize("keep_params", [False, True])
def test_pt2_transformer_matches_pytorch(llvm_target, keep_params: bool) -> None:
    pytest.importorskip("torch")
    model = load_model(PT2_ENCODER, keep_params=keep_params)
    assert symbolic_vars(model.mod) == ["s"]  # the Dim's name, not torch's s27
    assert upper_bounds(model.mod) == {"s": 512}
    assert model.reference is not None and model.reference.name == "pytorch"
    assert len(model.params) == (12 if keep_params else 0)
    assert 'mode="fast"' not in model.mod.script()  # no TVM warning at every legalization
    ex, _ = tf_compile(model.mod, llvm_target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for s in (1, 5, 16, 77):
        args = random_inputs(model.mod["main"], {"s": s}, np.random.default_rng(s), 1)
        (out,) = vm["main"](*[tvm.runtime.tensor(a) for a in [*args, *model.params]])
        (expected,) = model.reference.fn(*args)
        assert out.numpy().shape == expected.shape == (1, s, 64)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def pt2_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small torch MLP exported with Dim("n") through tunefarm's export helper."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from tuner.frontends.torch import export

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    path = tmp_path_factory.mktemp("pt2") / "mlp.pt2"
    export(net.eval(), (torch.randn(8, 32),), path, dynamic_shapes=({0: Dim("n", max=256)},))
    return path


@pytest.mark.slow
def test_pt2_without_recorded_names_keeps_torch_symbols(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    net = torch.nn.Linear(8, 4)
    ep = torch.export.export(net, (torch.randn(3, 8),), dynamic_shapes=({0: Dim("n")},))
    path = tmp_path / "plain.pt2"
    torch.export.save(ep, str(path))
    (name,) = symbolic_vars(load_model(path).mod)
    assert name != "n" and name.startswith("s")  # torch's own symbol
    result = runner.invoke(
        app, ["tune", str(path), "--shape", "n=4", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    one_line_error(result, f"model has {name}: input axis 0, 0..inf")
    assert "--shape input.0=V1,V2" in result.output  # how to address the axis without a name


# ---------------------------------------------------------------- bad files


def _write_bad(kind: str, tmp_path: Path) -> Path:
    if kind == "truncated.onnx":
        path = tmp_path / kind
        path.write_bytes(ONNX_MLP.read_bytes()[:5000])
    elif kind in ("text.onnx", "text.pt2"):
        path = tmp_path / kind
        path.write_text("this is not a model\n")
    elif kind == "empty.onnx":
        path = tmp_path / kind
        path.write_bytes(b"")
    elif kind == "unsupported.pt2":
        import torch

        class CumMax(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.cummax(x, 0).values

        path = tmp_path / kind
        torch.export.save(torch.export.export(CumMax(), (torch.randn(4, 4),)), str(path))
    else:
        path = tmp_path / kind
        path.write_text("x\n")
    return path


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("truncated.onnx", "cannot read"),
        ("text.onnx", "cannot read"),
        ("empty.onnx", "holds no ONNX graph"),
        ("text.pt2", "cannot read"),
        ("unsupported.pt2", "Unsupported function types ['cummax.default']"),
        ("model.txt", "unsupported model file"),
    ],
)
@pytest.mark.parametrize("command", ["tune", "bench"])
def test_bad_model_files_give_one_line(tmp_path: Path, kind: str, needle: str, command) -> None:
    pytest.importorskip("onnx" if kind.endswith(".onnx") else "torch")
    path = _write_bad(kind, tmp_path)
    url = f"sqlite:///{tmp_path / 'x.db'}"
    Storage(url).dispose()  # bench opens an existing database before the model
    result = runner.invoke(app, [command, str(path), "--db", url])
    one_line_error(result, needle)
    assert "Traceback" not in result.output


def test_keep_params_only_for_framework_models(tmp_path: Path) -> None:
    tvmscript = ROOT / "examples" / "mlp_dynamic.py"
    result = runner.invoke(
        app, ["tune", str(tvmscript), "--keep-params", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    one_line_error(result, "--keep-params applies to .onnx and .pt2 models only")


@pytest.mark.slow
@pytest.mark.parametrize(("model", "extra"), [(PT2_ENCODER, "torch"), (ONNX_MLP, "onnx")])
def test_missing_extra_names_it(model: Path, extra: str) -> None:
    """The framework not importable (as without the extra): one line naming the extra."""
    code = (
        f"import sys; sys.modules[{extra!r}] = None; sys.argv = ['tunefarm', 'tune', "
        f"{str(model)!r}]; from tuner.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"pip install 'tunefarm[{extra}]'" in lines[0]


# ---------------------------------------------------------------- tune, build, bench


@pytest.mark.slow
@pytest.mark.ray
def test_onnx_tune_build_bench(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    db = f"sqlite:///{tmp_path / 'onnx.db'}"
    common = ["--db", db]
    opts = ["--trials", "6", "--per-iter", "4", "--min-repeat-ms", "5", "--seed", "0"]
    result = runner.invoke(
        app, ["tune", str(ONNX_MLP), "--shape", "batch=16", *opts, "--json", *common]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["trials_measured"] >= 2
    so = tmp_path / "mlp.so"
    result = runner.invoke(app, ["build", str(ONNX_MLP), "-o", str(so), *common])
    assert result.exit_code == 0, result.output
    assert "buckets" in result.output and so.stat().st_size > 0
    js = tmp_path / "bench.json"
    result = runner.invoke(
        app, ["bench", str(ONNX_MLP), "--shape", "batch=1,16,40", "-o", str(js), *common]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(js.read_text())["results"]
    assert [r["shape"]["batch"] for r in rows] == [1, 16, 40]
    assert all(r["agree"] and r["reference"] == "untuned" for r in rows)
    # at the bucket its range kernels run (below it the dispatch may prefer the generic
    # kernel on measured cost)
    assert any(v.startswith("batch16") for v in rows[1]["kernels"].values())
    # above it (40 > 16): the bucket's range kernel or, where it is cheaper a row, the generic
    assert all(v == "generic" or v.startswith("batch16") for v in rows[2]["kernels"].values())


@pytest.mark.slow
@pytest.mark.ray
def test_pt2_tune_build_bench_against_pytorch(pt2_mlp: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'pt2.db'}"
    opts = ["--trials", "6", "--per-iter", "4", "--min-repeat-ms", "5", "--seed", "0"]
    result = runner.invoke(app, ["tune", str(pt2_mlp), "--shape", "n=16", *opts, "--db", db])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["build", str(pt2_mlp), "-o", str(tmp_path / "m.so"), "--db", db])
    assert result.exit_code == 0, result.output
    js = tmp_path / "bench.json"
    result = runner.invoke(
        app, ["bench", str(pt2_mlp), "--shape", "n=1,9,16,100", "-o", str(js), "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert "vs pytorch" in result.output
    rows = json.loads(js.read_text())["results"]
    assert [r["shape"]["n"] for r in rows] == [1, 9, 16, 100]
    for r in rows:
        assert r["agree"] and r["reference"] == "pytorch", r
        assert r["reference_sec"] > 0 and r["vs_reference"] > 0


# ---------------------------------------------------------------- plain torch.export files


def _export_diff(path: Path, max_len: int) -> Path:
    """``diff(x, dim=-1) + pos[:, :n-1]`` (pos a 16-long buffer), exported with plain
    torch.export: slices along axis -1, a slice of a buffer to a symbolic length."""
    import torch
    from torch.export import Dim

    class Diff(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("pos", torch.arange(16, dtype=torch.float32).reshape(1, 16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.diff(x, dim=-1) + self.pos[:, : x.shape[1] - 1]

    ep = torch.export.export(
        Diff(), (torch.randn(2, 8),), dynamic_shapes=({1: Dim("n", min=3, max=max_len)},)
    )
    torch.export.save(ep, str(path))
    return path


def _check_diff(model, target, lengths: tuple[int, ...]) -> None:
    ex, _ = tf_compile(model.mod, target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    (var,) = symbolic_vars(model.mod)
    for n in lengths:
        (x,) = random_inputs(model.mod["main"], {var: n}, np.random.default_rng(n), 1)
        out = vm["main"](tvm.runtime.tensor(x))
        out = out[0] if not hasattr(out, "numpy") else out
        (expected,) = model.reference.fn(x)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_pt2_slices_of_buffers_build_and_match(tmp_path: Path, llvm_target) -> None:
    """Slices provably in range (the symbol's range 3..16) keep exact extents, so a buffer
    sliced to the input's length adds to it."""
    pytest.importorskip("torch")
    model = load_model(_export_diff(tmp_path / "diff.pt2", 16))
    assert "T.min(" not in model.mod.script() and "R.match_cast" not in model.mod.script()
    _check_diff(model, llvm_target, (3, 9, 16))


def test_pt2_legalization_failure_names_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TVM's own slice with torch's negative axis (what TuneFarm's import avoids) fails in
    legalization: one line naming the Relax operator, the torch operator, the node, the
    user's source line and a hint, not TVM's bare check failure."""
    pytest.importorskip("torch")
    from tvm.relax.frontend.torch.exported_program_translator import (
        ExportedProgramImporter,
    )

    from tuner.frontends import torch_importer

    monkeypatch.setattr(
        torch_importer.ShapeRestoringImporter, "_slice", ExportedProgramImporter._slice
    )
    monkeypatch.setattr(torch_importer, "normalize_slice_axes", lambda mod: mod)
    path = _export_diff(tmp_path / "diff.pt2", 16)
    with pytest.raises(TuneFarmError) as info:
        load_model(path)
    err = str(info.value)
    assert "\n" not in err and err.startswith(f"cannot legalize {path}: relax.strided_slice"), err
    assert "(from aten.slice.Tensor) at node slice" in err and "in <model> (Diff)" in err, err
    assert "test_frontends.py:" in err and "; hint: " in err, err


def test_pt2_match_cast_restores_a_lost_shape(
    tmp_path: Path, llvm_target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TVM's own slice of the buffer (extent min(n - 1, 16)) makes the add's shape unknown;
    the node's fake tensor restores it with a match_cast and the module builds and matches."""
    pytest.importorskip("torch")
    from tvm.relax.frontend.torch.exported_program_translator import (
        ExportedProgramImporter,
    )

    from tuner.frontends import torch_importer

    def tvm_slice_for_the_buffer(self, node):
        if node.args[0].name.endswith("pos"):
            return ExportedProgramImporter._slice(self, node)
        return torch_importer.ShapeRestoringImporter._own_slice(self, node)

    monkeypatch.setattr(
        torch_importer.ShapeRestoringImporter,
        "_own_slice",
        torch_importer.ShapeRestoringImporter._slice,
        raising=False,
    )
    monkeypatch.setattr(torch_importer.ShapeRestoringImporter, "_slice", tvm_slice_for_the_buffer)
    model = load_model(_export_diff(tmp_path / "diff.pt2", 16))
    assert "R.match_cast" in model.mod.script()
    _check_diff(model, llvm_target, (3, 9, 16))


def test_onnx_axis_addressed_by_input_and_axis(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from tuner.symbolic.buckets import choose_buckets

    model = load_model(ONNX_MLP)
    given = {"x.0": [4, 16]}
    assert choose_buckets(model.mod, given) == {"batch": [4, 16]}
    for key, needle in [
        ("y.0", "the model has no input 'y' (inputs: x)"),
        ("x.3", "x has no axis 3 (ndim 2)"),
        ("x.1", "axis 1 of x is static (64)"),
    ]:
        with pytest.raises(TuneFarmError, match=re.escape(needle)):
            choose_buckets(model.mod, {key: [4]})
    result = runner.invoke(
        app, ["tune", str(ONNX_MLP), "--shape", "x.0=0", "--db", f"sqlite:///{tmp_path}/x.db"]
    )
    one_line_error(result, "--shape x.0: values must be positive integers")
