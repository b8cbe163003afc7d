"""Decoder folders in: config parsing, the exported module, and greedy tokens equal to
PyTorch's ``generate(do_sample=False)`` for Llama, Qwen2, Mistral and GPT-2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from database.storage import Storage
from tuner.cli.app import app
from tuner.errors import TuneFarmError
from tuner.llm.config import DecoderConfig
from tuner.llm.runtime import DecoderSession, decoder_module
from tuner.model import load_model

from .conftest import save_tiny

runner = CliRunner()
PROMPT = [3, 17, 42, 5, 9, 100, 7]


def test_config_rejects_unknown_architecture() -> None:
    with pytest.raises(TuneFarmError, match="unsupported decoder model_type 'bert'"):
        DecoderConfig.from_dict({"model_type": "bert"})


def test_config_names_a_missing_key() -> None:
    with pytest.raises(TuneFarmError, match="lacks 'hidden_size'"):
        DecoderConfig.from_dict({"model_type": "llama", "vocab_size": 10})


def test_folder_loads_as_prefill_and_decode_with_symbolic_lengths(tmp_path: Path) -> None:
    save_tiny("qwen2", tmp_path / "m")
    model = load_model(tmp_path / "m")
    assert "prompt" in str(model.mod["main"].params[0].ty)
    assert "context" in str(model.mod["main"].params[2].ty)
    assert model.shape_vars == {"prompt": [1, 16, 64, 256], "context": [64]}
    # the last token's logits only, as generate asks for them (logits_to_keep=1)
    logits = model.mod["main"].ret_ty.fields[0]
    assert [int(d) for d in logits.shape][:2] == [1, 1]


def test_folder_without_weights_is_one_line_error(tmp_path: Path) -> None:
    save_tiny("llama", tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    (tmp_path / "lib.so").write_bytes(b"")
    result = runner.invoke(
        app,
        ["generate", str(tmp_path / "m"), "--lib", str(tmp_path / "lib.so"), "--prompt-ids", "1"],
    )
    assert result.exit_code == 1
    assert "no model.safetensors" in result.output


def test_generate_needs_one_prompt(tmp_path: Path) -> None:
    save_tiny("llama", tmp_path / "m")
    result = runner.invoke(app, ["generate", str(tmp_path / "m"), "--lib", "x.so"])
    assert result.exit_code == 1
    assert "exactly one of --prompt and --prompt-ids" in result.output


@pytest.mark.slow
def test_build_then_generate_equals_torch_greedy(tiny_decoder, tmp_path: Path) -> None:
    """`tunefarm build FOLDER` then `tunefarm generate --json`: 32 greedy tokens equal
    transformers' own, and the prefill logits agree."""
    arch, folder, torch_model = tiny_decoder
    db = f"sqlite:///{tmp_path / 'tf.db'}"
    Storage(db, create=True)
    lib = tmp_path / "decoder.so"
    built = runner.invoke(app, ["build", str(folder), "-o", str(lib), "--db", db, "--json"])
    assert built.exit_code == 0, built.output
    threads = int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)
    result = runner.invoke(
        app,
        ["generate", str(folder), "--lib", str(lib), "--prompt-ids", ",".join(map(str, PROMPT)),
         "--max-new-tokens", "32", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output.strip().splitlines()[-1])
    with torch.no_grad():
        expected = torch_model.generate(
            torch.tensor([PROMPT]), max_new_tokens=32, min_new_tokens=32, do_sample=False
        )[0, len(PROMPT) :].tolist()
    assert data["tokens"] == expected
    assert len(set(expected)) > 3, f"{arch}: a degenerate model proves little"
    assert data["prefill_ms"] > 0 and data["decode_tokens_per_sec"] > 0
    # every CPU unless TVM_NUM_THREADS says otherwise (TVM's own x86 default: half of them)
    assert data["threads"] == threads and os.environ["TVM_NUM_THREADS"] == str(threads)

    session = DecoderSession(folder, lib)
    logits, cache = session.step(PROMPT[:4], session.empty_cache())
    logits, _ = session.step(PROMPT[4:], cache)  # a chunked prefill: 3 tokens after 4
    with torch.no_grad():
        ref = torch_model(torch.tensor([PROMPT])).logits[0, -1].numpy()
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)


def test_export_parameter_names_are_hugging_faces(tmp_path: Path) -> None:
    save_tiny("gpt2", tmp_path / "m")
    _, _, names = decoder_module(tmp_path / "m")
    assert "transformer.h.0.attn.c_attn.weight" in names and "lm_head.weight" in names


def test_generate_with_a_broken_library_is_one_line_error(tmp_path: Path) -> None:
    save_tiny("llama", tmp_path / "m")
    (tmp_path / "lib.so").write_bytes(b"not a library")
    result = runner.invoke(
        app,
        ["generate", str(tmp_path / "m"), "--lib", str(tmp_path / "lib.so"), "--prompt-ids", "1"],
    )
    assert result.exit_code == 1
    assert "cannot load" in result.output


@pytest.mark.slow
def test_tune_per_bucket_then_build_generates_torchs_tokens(tmp_path: Path) -> None:
    """`tunefarm tune FOLDER --shape prompt=1,16 --shape context=64` records kernels per bucket
    of both lengths; the build from that database still generates PyTorch's tokens."""
    torch_model = save_tiny("llama", tmp_path / "m")
    db = f"sqlite:///{tmp_path / 'tf.db'}"
    Storage(db, create=True)
    folder, lib = str(tmp_path / "m"), str(tmp_path / "tuned.so")
    tuned = runner.invoke(
        app,
        ["tune", folder, "--shape", "prompt=1,16", "--shape", "context=64", "--trials", "24",
         "--db", db, "--search", "thread", "--seed", "0", "--json"],
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    tasks = json.loads(tuned.output[tuned.output.index("{") :])["tasks"]
    names = " ".join(t["name"] for t in tasks)
    assert "prompt=1,context=64" in names and "prompt=16,context=64" in names
    built = runner.invoke(app, ["build", folder, "-o", lib, "--db", db, "--json"])
    assert built.exit_code == 0, built.output
    # the projections depend on the prompt alone; tuned at one context, every task's bucket
    # names context=64 too, and the build still finds their prompt buckets' records (which
    # schedule wins there is the search's business)
    kernels = json.loads(built.output[built.output.index("{") :])["kernels"]
    projections = [k for k in kernels if k["name"].startswith("fused_matmul") and k["symbolic"]]
    found = [k for k in projections if "no bucket records" not in k["dispatch"]]
    assert found and all(k["source"] != "untuned" or "record" in k["dispatch"] for k in found)
    _generates_torchs_tokens(folder, lib, torch_model)


@pytest.mark.slow
def test_a_decode_job_measures_the_matvec_schedule_first_and_generates_torchs_tokens(
    tmp_path: Path,
) -> None:
    """A decode-only job (Qwen2: the projections have a bias epilogue) first measures the
    known matrix-vector schedule of each projection (tuner.search.matvec), records it, and the
    build from that database still generates PyTorch's tokens."""
    import sqlite3

    torch_model = save_tiny("qwen2", tmp_path / "m")
    path = tmp_path / "tf.db"
    folder, lib, db = str(tmp_path / "m"), str(tmp_path / "tuned.so"), f"sqlite:///{path}"
    tuned = runner.invoke(
        app,
        ["tune", folder, "--shape", "prompt=1", "--shape", "context=64", "--trials", "30",
         "--retime", "0", "--db", db, "--search", "thread", "--seed", "0", "--json"],
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    assert json.loads(tuned.output[tuned.output.index("{") :])["search"]["matvec_tasks"] >= 4
    with sqlite3.connect(path) as conn:  # the query's [64 x 64] weight: 2 column blocks of 2
        traces = conn.execute(
            "select trace_json from tuning_records where run_secs_json is not null"
        ).fetchall()
    tilings = [t for (t,) in traces if [2, 1, 2, 16] in [d for _, d in json.loads(t)[1]]]
    assert tilings  # measured, not only generated
    built = runner.invoke(app, ["build", folder, "-o", lib, "--db", db])
    assert built.exit_code == 0, built.output
    _generates_torchs_tokens(folder, lib, torch_model)


def test_a_pt2_exported_with_its_cache_is_refused_in_one_line(tmp_path: Path) -> None:
    """transformers' export with a static cache (buffers written in place) would import as a
    model whose cache never changes: refused, naming the folder route instead."""
    from transformers.integrations.executorch import convert_and_export_with_cache

    model = save_tiny("llama", tmp_path / "m")
    model.generation_config.cache_implementation = "static"
    model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": 32}
    torch.export.save(convert_and_export_with_cache(model), str(tmp_path / "m.pt2"))
    db = f"sqlite:///{tmp_path / 'tf.db'}"
    Storage(db, create=True)
    result = runner.invoke(
        app, ["build", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "m.so"), "--db", db]
    )
    assert result.exit_code == 1, result.output
    assert result.output.strip().count("\n") == 0, result.output
    assert "KV cache as buffers" in result.output and "model folder" in result.output


def _generates_torchs_tokens(folder: str, lib: str, torch_model: torch.nn.Module) -> None:
    """`tunefarm generate` from ``lib`` yields ``model.generate(do_sample=False)``'s 16 tokens."""
    ids = ",".join(map(str, PROMPT))
    result = runner.invoke(
        app,
        ["generate", folder, "--lib", lib, "--prompt-ids", ids, "--max-new-tokens", "16", "--json"],
    )
    assert result.exit_code == 0, result.output
    with torch.no_grad():
        expected = torch_model.generate(
            torch.tensor([PROMPT]), max_new_tokens=16, min_new_tokens=16, do_sample=False
        )[0, len(PROMPT) :].tolist()
    assert json.loads(result.output.strip().splitlines()[-1])["tokens"] == expected
