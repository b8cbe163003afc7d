"""Hugging Face models as users export them: plain ``torch.export.export`` + ``torch.export.save``
(no TuneFarm wrapper, so no Dim names) and ``torch.onnx.export``; tiny random configs, no
download. Each imports, builds and matches PyTorch at every length in its range; BERT tunes,
builds and benches through the CLI with its dim addressed as ``input_ids.1``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from typer.testing import CliRunner

pytest.importorskip("torch", reason="needs torch: pip install 'tunefarm[torch]'")
pytest.importorskip("transformers", reason="needs transformers: pip install 'tunefarm[hf]'")

from tuner.bench.timing import random_inputs
from tuner.cli import app
from tuner.compile import compile as tf_compile
from tuner.frontends.reference import flat_outputs
from tuner.model import load_model
from tuner.symbolic.buckets import lower_bounds, symbolic_dims, upper_bounds

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
MAX_LEN = 64


def _bert() -> tuple:
    import torch
    import transformers as tr

    cfg = tr.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=MAX_LEN,
    )
    ids = torch.randint(0, 100, (1, 8))
    return tr.BertModel(cfg).eval(), ids, {1: torch.export.Dim("seq", min=2, max=MAX_LEN)}


def _gpt2() -> tuple:
    import torch
    import transformers as tr

    cfg = tr.GPT2Config(
        n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=MAX_LEN, use_cache=False
    )
    ids = torch.randint(0, 100, (1, 8))
    return tr.GPT2Model(cfg).eval(), ids, {1: torch.export.Dim("seq", min=2, max=MAX_LEN)}


def _vit() -> tuple:
    import torch
    import transformers as tr

    cfg = tr.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    x = torch.randn(2, 3, 32, 32)
    return tr.ViTModel(cfg).eval(), x, {0: torch.export.Dim("batch", min=1, max=16)}


MODELS = {"bert": _bert, "gpt2": _gpt2, "vit": _vit}


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each model exported with plain torch.export (+ BERT with torch.onnx.export)."""
    import torch

    out = tmp_path_factory.mktemp("hf")
    files: dict[str, Path] = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        model, example, dims = make()
        ep = torch.export.export(model, (example,), dynamic_shapes=(dims,))
        files[name] = out / f"{name}.pt2"
        torch.export.save(ep, str(files[name]))
        if name == "bert":

            class Outputs(torch.nn.Module):
                def __init__(self, inner: torch.nn.Module) -> None:
                    super().__init__()
                    self.inner = inner

                def forward(self, input_ids: torch.Tensor) -> tuple:
                    res = self.inner(input_ids=input_ids)
                    return res.last_hidden_state, res.pooler_output

            files["bert_onnx"] = out / "bert.onnx"
            torch.onnx.export(
                Outputs(model).eval(),
                (example,),
                str(files["bert_onnx"]),
                dynamo=False,
                input_names=["input_ids"],
                dynamic_axes={"input_ids": {1: "seq"}},
            )
            model.eval()  # the legacy exporter restores the wrapper's (training) mode
            files["bert_module"] = model  # type: ignore[assignment]
    return files


def _max_errors(model, values: dict[str, list[int]], reference, target) -> dict[int, float]:
    """Untuned build of ``model`` against ``reference(*inputs)`` at each value."""
    ex, _ = tf_compile(model.mod, target, None)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    (name,) = values
    errors = {}
    for v in values[name]:
        args = random_inputs(model.mod["main"], {name: v}, np.random.default_rng(v), 1)
        if args[0].dtype == np.int64:
            args = [np.random.default_rng(v).integers(0, 100, a.shape) for a in args]
        got = flat_outputs(vm["main"](*[tvm.runtime.tensor(a) for a in args]))
        want = reference(*args)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        errors[v] = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
    return errors


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_hf_pt2_matches_pytorch_at_every_length(hf_files, llvm_target, name: str) -> None:
    """Plain torch.export files: torch's own symbol (no Dim name), its range as bounds, and
    the untuned build equal to PyTorch from the range's low end to its high end."""
    model = load_model(hf_files[name])
    ((var, where),) = symbolic_dims(model.mod).items()
    assert var.startswith("s")  # torch.export.save dropped the Dim name
    assert where == ([("pixel_values", 0)] if name == "vit" else [("input_ids", 1)])
    lo, hi = lower_bounds(model.mod)[var], upper_bounds(model.mod)[var]
    assert (lo, hi) == ((1, 16) if name == "vit" else (2, MAX_LEN))
    values = sorted({lo, 3, 16, 37, hi} if name != "vit" else {1, 3, 16})
    errors = _max_errors(model, {var: values}, model.reference.fn, llvm_target)
    print(name, errors)


@pytest.mark.slow
def test_hf_bert_onnx_builds_and_matches_pytorch(hf_files, llvm_target) -> None:
    import torch

    model = load_model(hf_files["bert_onnx"])
    assert symbolic_dims(model.mod) == {"seq": [("input_ids", 1)]}
    module = hf_files["bert_module"]

    def reference(ids: np.ndarray) -> list[np.ndarray]:
        with torch.no_grad():
            res = module(input_ids=torch.from_numpy(ids))
        return [res.last_hidden_state.numpy(), res.pooler_output.numpy()]

    print(_max_errors(model, {"seq": [2, 5, 16, MAX_LEN]}, reference, llvm_target))


@pytest.mark.slow
def test_plain_pt2_in_a_fresh_process_says_how_to_address_the_axis(hf_files) -> None:
    """transformers not imported (the file's ModelOutput type is imported on load) and the Dim
    name not in the file: the error names the variable, its input, axis and range and the
    INPUT.AXIS form, which resolves to the variable (in place, for bench's lookups)."""
    code = (
        "import sys; from tuner.symbolic.buckets import choose_buckets; "
        "from tuner.model import load_model; "
        "assert 'transformers' not in sys.modules; "
        "mod = load_model(sys.argv[1]).mod; given = {'input_ids.1': [16, 32]}; "
        "print(choose_buckets(mod, given), given); "
        "choose_buckets(mod, {'seq': [16]})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(hf_files["bert"])],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 1 and "TuneFarmError" in proc.stderr, proc.stderr
    resolved = proc.stdout.strip().splitlines()[-1]
    var = resolved.split("'")[1]
    assert var.startswith("s") and resolved == f"{{'{var}': [16, 32]}} {{'{var}': [16, 32]}}"
    error = proc.stderr.strip().splitlines()[-1]
    assert f"unknown variable(s) seq; model has {var}: input_ids axis 1, 2..64" in error
    assert "--shape input_ids.1=V1,V2" in error


@pytest.mark.slow
@pytest.mark.ray
def test_hf_bert_tune_bench_by_axis(hf_files, tmp_path: Path) -> None:
    """tune and bench (which builds the tuned module and checks it against PyTorch) a plain
    .pt2 BERT with its dim addressed as input_ids.1."""
    path = str(hf_files["bert"])
    db = ["--db", f"sqlite:///{tmp_path / 'bert.db'}"]
    opts = ["--trials", "1", "--per-iter", "1", "--min-repeat-ms", "5", "--seed", "0"]
    result = runner.invoke(app, ["tune", path, "--shape", "input_ids.1=16", *opts, *db])
    assert result.exit_code == 0, result.output
    js = tmp_path / "bench.json"
    result = runner.invoke(
        app, ["bench", path, "--shape", "input_ids.1=2,16,64", "-o", str(js), *db]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(js.read_text())["results"]
    assert [next(iter(r["shape"].values())) for r in rows] == [2, 16, 64]
    for r in rows:
        assert r["agree"] and r["reference"] == "pytorch", r


@pytest.mark.slow
@pytest.mark.ray
def test_hf_bert_onnx_tune_bench_by_axis(hf_files, tmp_path: Path) -> None:
    """The ONNX export of the same BERT tunes and benches, its dim also addressed by axis."""
    path = str(hf_files["bert_onnx"])
    db = ["--db", f"sqlite:///{tmp_path / 'bert_onnx.db'}"]
    opts = ["--trials", "1", "--per-iter", "1", "--min-repeat-ms", "5", "--seed", "0"]
    result = runner.invoke(app, ["tune", path, "--shape", "input_ids.1=16", *opts, *db])
    assert result.exit_code == 0, result.output
    js = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", path, "--shape", "input_ids.1=2,16", "-o", str(js), *db])
    assert result.exit_code == 0, result.output
    rows = json.loads(js.read_text())["results"]
    assert [r["shape"]["seq"] for r in rows] == [2, 16]
    assert all(r["agree"] and r["reference"] == "untuned" for r in rows)
