"""``tunefarm bench`` on a decoder folder: prefill and decode rows for the builds, PyTorch
eager and torch.compile, the output check, the bandwidth bound, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database.storage import Storage
from tuner.cli.app import app
from tuner.llm.bench import cache_bytes, decode_bytes, triad_bandwidth
from tuner.llm.runtime import build, decoder_module
from tuner.llm.weights import load_params

from .conftest import save_tiny

runner = CliRunner()


def _json(output: str) -> dict:
    return json.loads(output[output.index("{") :])


def test_triad_bandwidth_is_positive_and_checked() -> None:
    bw = triad_bandwidth(threads=2, repeat=2, array_bytes=8 << 20)
    assert bw > 1e8  # bytes/s: any machine moves more than 100 MB/s


def test_decode_bytes_count_each_weight_once_and_one_embedding_row(tmp_path: Path) -> None:
    model = save_tiny("llama", tmp_path / "m")
    cfg, _, names = decoder_module(tmp_path / "m")
    params = load_params(tmp_path / "m", cfg, names)
    total = sum(p.numel() for p in model.parameters()) * 4
    embed = cfg.vocab_size * cfg.hidden_size * 4
    rope_rows = 2 * cfg.head_dim * 4  # one row each of the cos and sin tables
    assert decode_bytes(cfg, params, names) == total - embed + cfg.hidden_size * 4 + rope_rows
    assert cache_bytes(cfg, 10) == 2 * cfg.num_layers * 10 * cfg.num_kv_heads * cfg.head_dim * 4


@pytest.mark.slow
def test_bench_decoder_rows_checks_and_bound(tmp_path: Path) -> None:
    """The real paths at a tiny size: the built library as tuned, an untuned build, eager and
    torch.compile, prefill at 8 tokens and decode after 32; every output close to eager's."""
    save_tiny("llama", tmp_path / "m")
    lib = build(tmp_path / "m", tmp_path / "m.so")
    result = runner.invoke(
        app,
        ["bench", str(tmp_path / "m"), "--lib", str(lib), "--shape", "prompt=8",
         "--shape", "context=32", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = _json(result.output)
    assert data["kind"] == "decoder" and data["agree"] is True
    assert data["bandwidth_gbs"] > 0.1 and data["weight_bytes"] > 0
    (prefill,) = data["prefill"]
    (decode,) = data["decode"]
    assert prefill["length"] == 8 and decode["length"] == 32
    assert {"tuned", "untuned", "eager"} <= set(prefill["ms"])
    assert "torch.compile" not in prefill["ms"]  # the recipe prefills uncompiled
    assert {"tuned", "untuned", "eager"} <= set(decode["ms"])
    # torch.compile runs the decode, or says in one line why it could not
    compiled = "torch.compile" in decode["ms"]
    assert compiled or "\n" not in data["errors"]["torch.compile"]
    for row in (prefill, decode):
        assert all(ms > 0 for ms in row["ms"].values())
        assert set(row["vs_tuned"]) == set(row["ms"]) - {"tuned"}
        assert set(row["checks"]) == set(row["ms"]) - {"eager"}
        assert all(c["ok"] and c["same_argmax"] for c in row["checks"].values())
    assert decode["bound_ms"] > 0 and decode["tuned_of_bound"] > 0
    weights_ms = data["weight_bytes"] / (data["bandwidth_gbs"] * 1e9) * 1e3
    assert decode["bound_ms"] >= weights_ms * 0.99  # the weights, plus the cache

    table = runner.invoke(
        app,
        ["bench", str(tmp_path / "m"), "--lib", str(lib), "--shape", "prompt=4",
         "--shape", "context=8", "--runtimes", "none"],
    )  # fmt: skip
    assert table.exit_code == 0, table.output
    assert "untuned" not in table.output  # --runtimes none: tuned and eager only
    assert "prefill" in table.output and "memory bandwidth" in table.output
    assert "all close, same argmax" in table.output


@pytest.mark.slow
def test_bench_decoder_flags_a_library_built_for_another_config(tmp_path: Path) -> None:
    """A library built with another RMSNorm epsilon computes other logits: the check says so
    and bench exits 2 (the check can fail); the untuned build, from the folder, agrees."""
    save_tiny("llama", tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "other")
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    config["rms_norm_eps"] = 0.5
    (tmp_path / "other" / "config.json").write_text(json.dumps(config))
    lib = build(tmp_path / "other", tmp_path / "other.so")
    result = runner.invoke(
        app,
        ["bench", str(tmp_path / "m"), "--lib", str(lib), "--shape", "prompt=4",
         "--shape", "context=8", "--runtimes", "untuned", "--json"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    data = _json(result.output)
    assert data["agree"] is False
    for row in (*data["prefill"], *data["decode"]):
        assert row["checks"]["tuned"]["ok"] is False and row["checks"]["untuned"]["ok"] is True


@pytest.mark.slow
def test_bench_decoder_builds_the_tuned_library_from_the_database(tmp_path: Path) -> None:
    """Without --lib the tuned build comes from --db (here empty: nothing tuned)."""
    save_tiny("qwen2", tmp_path / "m")
    db = f"sqlite:///{tmp_path / 'tf.db'}"
    Storage(db, create=True)
    result = runner.invoke(
        app,
        ["bench", str(tmp_path / "m"), "--db", db, "--shape", "prompt=4", "--shape",
         "context=8", "--runtimes", "none", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = _json(result.output)
    assert data["tuned_share"] == 0.0 and data["agree"] is True
    assert "torch.compile" not in data["errors"] and "torch.compile" not in data["decode"][0]["ms"]


def test_bench_on_a_folder_that_is_not_a_decoder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    result = runner.invoke(app, ["bench", str(tmp_path / "bert"), "--lib", "x.so"])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0, result.output
    assert "unsupported decoder model_type 'bert'" in result.output


def test_bench_decoder_rejects_bad_options_in_one_line(tmp_path: Path) -> None:
    save_tiny("llama", tmp_path / "m")
    (tmp_path / "m.so").write_bytes(b"")
    cases = {
        ("--shape", "batch=2"): "names prompt and context",
        ("--runtimes", "onnxruntime"): "torch.compile, untuned",
        ("--shape", "context=250"): "contexts in",
        ("--kernels",): "runs locally",
    }
    for extra, message in cases.items():
        args = ["bench", str(tmp_path / "m"), "--lib", str(tmp_path / "m.so"), *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (extra, result.output)
        assert message in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["bench", "examples/mlp.py", "--lib", str(tmp_path / "m.so")])
    assert result.exit_code == 1 and "--lib is for a decoder folder" in result.output
