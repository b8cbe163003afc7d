"""The models section (``python -m benchmarks models``, ``make bench``'s ``models`` part): one row
per model and shape with every runtime's figures, rendered in the performance report."""

from __future__ import annotations

import pytest

from benchmarks.models import MODELS, SUITE_MODELS, row_of
from benchmarks.report import render
from tuner.bench.results import BenchResult, Paired, RuntimeResult


def _bench_json(error: str | None, spread: float | None = None, paired: dict | None = None) -> dict:
    ort = (
        RuntimeResult("onnxruntime", error=error)
        if error
        else RuntimeResult(
            "onnxruntime", sec=4e-4, max_abs_err=1e-6, agree=True, setup_sec=3.0, spread=spread
        )
    )
    return BenchResult(
        untuned_sec=2e-3,
        tuned_sec=5e-4,
        numpy_sec=None,
        max_abs_err=1e-6,
        reference="pytorch",
        agree=True,
        tuned_share=1.0,
        untuned_kernels=[],
        shape={"s": 16},
        kernels={},
        reference_sec=1e-3,
        runtimes=(
            RuntimeResult("torch.compile", sec=8e-4, max_abs_err=2e-6, agree=False, warmup_sec=9.5),
            ort,
        ),
        threads=2,
        spread={"tuned": 0.05, "untuned": 0.4 if spread else 0.05},
        paired=paired or {},
    ).to_dict()


def test_rows_carry_every_runtime_and_render_in_the_report() -> None:
    row = row_of("examples/transformer_encoder.pt2", 60.0, _bench_json(None))
    assert row["shape"] == "s=16" and row["reference"] == "pytorch"
    assert row["tuned_ms"] == 0.5 and row["reference_ms"] == 1.0
    assert row["torch.compile_ms"] == 0.8 and row["onnxruntime_ms"] == 0.4
    assert row["tuned_vs_torch.compile"] == 1.6 and row["tuned_vs_onnxruntime"] == 0.8
    assert row["torch.compile_warmup_sec"] == 9.5
    assert row["notes"] == "torch.compile: MISMATCH (max err 2e-06)"
    assert len(row) <= 16  # the report's generic tables show 16 columns
    failed = row_of("m.pt2", 1.0, _bench_json("not installed: pip install 'tunefarm[ort]'"))
    assert failed["onnxruntime_ms"] is None and failed["tuned_vs_onnxruntime"] is None
    assert "onnxruntime: not installed" in failed["notes"]
    part = {"source": "benchmarks.models", "data": {"threads": 2, "rows": [row, failed]}}
    text = render({"models": part}, {})
    assert "## Models: TuneFarm vs PyTorch eager, torch.compile, ONNX Runtime" in text
    assert "torch.compile_ms" in text and "tuned_vs_onnxruntime" in text
    assert "onnxruntime: not installed" in text


def test_a_figure_whose_repeats_spread_widely_is_marked_noisy() -> None:
    row = row_of("m.pt2", 1.0, _bench_json(None, spread=0.6))
    assert "noisy (repeats spread over 25%): onnxruntime, untuned" in row["notes"]
    assert "noisy" not in (row_of("m.pt2", 1.0, _bench_json(None))["notes"] or "")


def test_ratios_are_the_paired_rounds_and_their_spread_marks_them_noisy() -> None:
    """The rows' ratios are the paired medians (not 4e-4 / 5e-4), and a paired ratio whose
    rounds spread is noisy although both times held still."""
    row = row_of(
        "m.pt2", 1.0, _bench_json(None, paired={"onnxruntime": Paired(1.1, 0.3, 4.4e-4, 4e-4)})
    )
    assert row["tuned_vs_onnxruntime"] == 1.1 and row["tuned_vs_torch.compile"] == 1.6
    assert "noisy (repeats spread over 25%): onnxruntime/tuned" in row["notes"]


def test_suite_models_are_known() -> None:
    assert set(SUITE_MODELS) <= set(MODELS)
    assert all(MODELS[m].get("bench") for m in SUITE_MODELS)


@pytest.mark.slow
def test_hf_models_export_and_count_their_tasks(tmp_path) -> None:
    """``--hf``: the models are exported with plain torch.export (no Dim names kept) and the
    budget per bucket task multiplies the deduplicated task count of the model's buckets."""
    pytest.importorskip("transformers", reason="needs transformers: pip install 'tunefarm[hf]'")
    from benchmarks.models import HF_MODELS, export_hf, task_count

    paths = export_hf(["hf:bert"], tmp_path)
    assert list(paths) == ["hf:bert"] and paths["hf:bert"].endswith("bert.pt2")
    one = task_count(paths["hf:bert"], ["input_ids.1=16"])
    tune = HF_MODELS["hf:bert"]["tune"]
    every = task_count(paths["hf:bert"], tune)
    buckets = len(tune[0].split("=")[1].split(","))
    # two layers share their kernels; more buckets re-specialize the length-dependent ones
    assert 10 < one < every <= buckets * one


def test_trials_per_task_must_be_positive(capsys) -> None:
    from benchmarks.models import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--hf", "bert", "--trials-per-task", "0"])
    assert exit_info.value.code == 2
    assert "--trials-per-task must be at least 1" in capsys.readouterr().err
