"""Baselines timed in a child process without tvm, and figures judged invalid, not ratios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.baseline import (
    MATMUL,
    BaselineProcess,
    interleave,
    invalid_figures,
    invalid_reason,
    load_plain_function,
    measured_peak,
    wait_quiet,
)
from benchmarks.common import stat
from benchmarks.report import headline, ms_cell, peak_cell, ratio_cell, summarize_reasons

ROOT = Path(__file__).resolve().parents[2]


def test_child_never_imports_tvm_and_uses_the_same_threads() -> None:
    """Loading a model file's numpy_reference (the file imports tvm) runs only its plain-Python
    parts in the child; the child's OpenBLAS gets as many threads as TVM."""
    with BaselineProcess(threads=2) as bp:
        assert bp.info["tvm_imported"] is False
        assert bp.info["env"]["OPENBLAS_NUM_THREADS"] == "2"
        bp.load("qkv", {"kind": "file", "path": str(ROOT / "examples/qkv_dynamic.py")})
        x = np.ones((2, 768), np.float32)
        w = np.ones((768, 2304), np.float32)
        bp.set_args("qkv", [x, w])
        secs = bp.samples("qkv", min_ms=1, n=3, warmup=True)
        assert len(secs) == 3 and all(s > 0 for s in secs)
        bp.load("mm", MATMUL)
        bp.set_random_args("mm", [(32, 32), (32, 32)])
        assert bp.time("mm", repeats=3, min_ms=1)["n"] == 3
        summary = bp.summary()
    assert summary["tvm_imported"] is False and summary["threads"] == 2
    assert summary["parent_quiet"]["n"] == summary["child_quiet"]["n"] == 1 + 1 + 3


def test_plain_function_skips_the_tvm_parts() -> None:
    ref = load_plain_function(ROOT / "examples/mlp_dynamic.py", "numpy_reference")
    rng = np.random.default_rng(0)
    shapes = [(3, 256), (256, 512), (512,), (512, 256), (256,)]
    out = ref(*(rng.standard_normal(s, dtype=np.float32) for s in shapes))
    assert out.shape == (3, 256) and out.dtype == np.float32
    with pytest.raises(KeyError, match="Module"):
        load_plain_function(ROOT / "examples/mlp_dynamic.py", "Module")


def test_spread_above_25_percent_is_invalid() -> None:
    assert invalid_reason(stat([1.0, 1.31, 1.0])) == "spread 31%"
    assert invalid_reason(stat([1.0, 1.25, 1.0])) is None
    assert invalid_reason(stat([1.0, 1.253, 1.0])) == "spread 25.3%"
    assert invalid_reason(None) is None


def test_rate_above_the_measured_peak_is_invalid() -> None:
    t = stat([1.0, 1.0, 1.0]) | {"gflops": 206.0}
    assert invalid_reason(t, peak_gflops=100.0) == "above measured peak"
    assert invalid_reason(t, peak_gflops=210.0) is None
    res = {"kernels": {"rows": [{"M": 8, "tuned": t, "numpy": stat([1.0, 2.0, 1.0])}]}}
    assert invalid_figures(res, 100.0) == [
        "kernels.rows[8].tuned (above measured peak)",
        "kernels.rows[8].numpy (spread 100%)",
    ]
    assert res["kernels"]["rows"][0]["tuned"]["invalid"] == "above measured peak"


def test_measured_peak_skips_calibrations_that_spread() -> None:
    good = {"gflops": 150.0, "sec": stat([1.0, 1.05, 1.0])}
    noisy = {"gflops": 220.0, "sec": stat([1.0, 1.41, 1.0])}
    assert measured_peak([noisy, good]) == (150.0, None)
    assert measured_peak([noisy]) == (220.0, "peak spread 41%")
    assert measured_peak([None, {}]) == (None, None)


def _res(numpy: dict, tuned: dict) -> dict:
    peak = {"gflops": 100.0, "sec": stat([1.0, 1.0, 1.0])}
    row = {"M": 8, "on_bucket": True, "untuned": stat([9.0, 9.0, 9.0])}
    return {
        "peak": peak,
        "settings": {"trials_per_bucket": 4},
        "kernels": {"buckets": [8], "rows": [row | {"numpy": numpy, "tuned": tuned}]},
    }


def test_report_prints_invalid_instead_of_a_ratio() -> None:
    """Table cells and the headline say ``invalid (...)``; valid figures keep their ratios."""
    noisy = stat([1.0, 72.0, 1.0]) | {"gflops": 50.0}
    fast = stat([0.5, 0.5, 0.5]) | {"gflops": 206.0}
    ok = stat([1.0, 1.0, 1.0]) | {"gflops": 50.0}
    res = _res(noisy, ok)
    assert ms_cell(noisy, res) == "invalid (spread 7100%)"
    assert ratio_cell(res, noisy, ok) == "invalid (spread 7100%)"
    assert ratio_cell(res, res["kernels"]["rows"][0]["untuned"], ok) == "9.00x"
    text = "\n".join(headline(res))
    assert "**invalid (spread 7100%)** numpy/OpenBLAS's speed" in text
    assert "**9.0x** faster than the untuned default" in text
    assert "best 50% of the measured SGEMM peak" in text
    res = _res(ok, fast)
    assert peak_cell(res, fast) == "invalid (above measured peak)"
    text = "\n".join(headline(res))
    assert "fraction of the measured SGEMM peak invalid (above measured peak)" in text
    assert "**Invalid figures**: 1 figure(s)" in text
    reasons = ["spread 31%", "above measured peak", "spread 7100%", "above measured peak"]
    assert summarize_reasons(reasons) == "spread up to 7100%, above measured peak"


def test_interleave_alternates_and_rotates() -> None:
    calls: list[str] = []

    def timer(name: str) -> float:
        calls.append(name)
        return 1.0

    out = interleave({"a": lambda: timer("a"), "b": lambda: timer("b")}, 3, warmup=False)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert out["a"] == {"median": 1.0, "spread": 0.0, "n": 3, "min": 1.0}


def test_wait_quiet_returns_when_idle() -> None:
    waited = wait_quiet(timeout_s=2.0)
    assert waited is not None and waited < 2.0
