"""The benchmark suite's report: a tiny real run through the writer, and its pure pieces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import stat
from benchmarks.report import (
    BEGIN,
    END,
    dispatch_phrase,
    headline,
    reach_phrase,
    span,
    write_report,
)
from benchmarks.suite import Settings, best_so_far, noisy_figures, run_suite, to_target

PNG = b"\x89PNG\r\n\x1a\n"


def test_stat_median_and_spread() -> None:
    s = stat([1.0, 2.0, 4.0])
    assert s["median"] == 2.0 and s["spread"] == pytest.approx(1.5) and s["n"] == 3


def test_best_so_far_and_target() -> None:
    secs = [None, 4.0, 5.0, 1.0]
    curve = best_so_far([{"wall": float(i), "sec": s} for i, s in enumerate(secs, 1)])
    assert [p["best"] for p in curve] == [None, 4.0, 4.0, 1.0]
    assert to_target(curve, 1.0 / 0.9) == {"trial": 4, "wall": 4.0}
    assert to_target(curve, 0.5) is None


def test_noisy_figures_names_the_noisy_ones() -> None:
    res = {"kernels": {"rows": [{"M": 8, "tuned": stat([1.0, 1.5]), "numpy": stat([1.0, 1.01])}]}}
    assert noisy_figures(res) == ["kernels.rows[8].tuned (40%)"]


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="repeats"):
        Settings(repeats=1)


def test_headline_wording() -> None:
    """Equal range ends print one number, a negative dispatch overhead reads as a gain, and a
    tuner that never reached 90% says so with its budget."""
    assert span([0.3383, 0.3368]) == "0.34"
    assert span([0.31, 0.34]) == "0.31–0.34"
    assert dispatch_phrase([0.134, -0.036]) == (
        "symbolic dispatch costs at most +13.4% against the static kernel "
        "(and is up to 3.6% faster at some values)"
    )
    assert dispatch_phrase([0.02, 0.134]) == (
        "symbolic dispatch costs +2.0–13.4% against the static kernel"
    )
    assert "faster than the static kernel" in dispatch_phrase([-0.01, -0.036])
    assert reach_phrase({"trials": 16, "to_90pct": {"trial": 2, "wall": 3.0}}) == "2 trials"
    assert reach_phrase({"trials": 16, "to_90pct": None}) == ("did not reach 90% within 16 trials")
    job = {"candidates_per_sec": 0.3383, "db_share": 0.003}
    res = {
        "efficiency": {
            "task": "QKV matmul M=128",
            "TuneFarm": {"trials": 16, "to_90pct": None, "wall_per_trial": 3.2},
            "MetaSchedule": {"trials": 16, "to_90pct": {"trial": 16}, "wall_per_trial": 2.9},
        },
        "overhead": {
            "tunefarm_jobs": [job, {**job, "candidates_per_sec": 0.3368}],
            "dispatch": [{"overhead": 0.134}, {"overhead": -0.036}],
        },
    }
    text = "\n".join(headline(res))
    assert "never" not in text and "0.34–0.34" not in text and "-3.6%" not in text
    assert "TuneFarm did not reach 90% within 16 trials, MetaSchedule 16 trials" in text
    assert "Overhead: 0.34 candidates/s" in text


@pytest.mark.slow
def test_report_from_a_tiny_real_run(tmp_path: Path) -> None:
    """Peak calibration, untuned/numpy timings of the QKV matmul at two M (no tuning), the
    GPU part's skip line and the plug-in parts, through the Markdown and PNG writer."""
    settings = Settings(
        trials_per_bucket=0, values=(1, 8), repeats=3, min_repeat_ms=5, peak_n=256, buckets=(8,)
    )
    res = run_suite(["kernels", "efficiency", "cost-model", "gpu"], settings, log=lambda _m: None)
    json.dumps(res)  # JSON-able as the results file
    rows = res["kernels"]["rows"]
    assert [r["M"] for r in rows] == [1, 8]
    assert all(r["untuned_agree"] and r["untuned"]["median"] > 0 for r in rows)
    assert res["peak"]["gflops"] > 0
    # numpy and the peak were timed in the baseline process, interleaved, without tvm there
    assert res["baseline"]["tvm_imported"] is False
    assert res["baseline"]["parent_quiet"]["n"] >= 2 * (settings.repeats + 1)
    assert all("invalid" in r["numpy"] for r in rows)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\nrest\n")
    out = write_report(res, tmp_path / "docs" / "performance.md", readme=readme)
    text = out.read_text()
    headings = ("## Headline", "## Run", "## Baselines and protocol", "## Kernels", "## GPU")
    for heading in (*headings, "## Tuning efficiency"):
        assert heading in text
    assert "| 8 | on |" in text and "tvm imported there: False" in text
    assert "Skipped: no GPU" in text or "Device:" in text
    png = tmp_path / "docs" / "img" / "perf-kernels.png"
    assert png.read_bytes()[:8] == PNG
    assert "![kernel GFLOPS over M](img/perf-kernels.png)" in text
    assert "old" not in readme.read_text() and "rest" in readme.read_text()


@pytest.mark.slow
def test_efficiency_and_overhead_plots(tmp_path: Path) -> None:
    curve = best_so_far([{"wall": float(i), "sec": 1.0 / i} for i in range(1, 6)])
    part = {"curve": curve, "final_sec": 0.2, "final_gflops": 1.0, "trials": 5}
    part |= {"wall_sec": 5.0, "wall_per_trial": 1.0, "to_90pct": {"trial": 5, "wall": 5.0}}
    phases = {"startup": 1.0, "build_wait": 2.0, "run_wait": 1.0, "database": 0.1, "search": 0.9}
    res = {
        "efficiency": {"task": "t", "trials": 5, "TuneFarm": part, "MetaSchedule": part},
        "overhead": {
            "tunefarm_jobs": [
                {"job": "j", "trials": 5, "wall_sec": 5.0, "candidates_per_sec": 1.25}
                | {"phases": phases, "db_share": 0.02}
            ],
            "stock_jobs": [],
            "dispatch": [{"M": 8, "module_sec": 1.1e-3, "static_sec": 1e-3, "overhead": 0.1}],
        },
    }
    text = write_report(res, tmp_path / "p.md", readme=None).read_text()
    for name in ("perf-efficiency.png", "perf-overhead.png"):
        assert (tmp_path / "img" / name).read_bytes()[:8] == PNG
    assert "+10.0%" in text and "1.25" in text


def test_plugin_parts_fall_back_to_results_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the module, a part reads the latest results file, else says it was not run."""
    from benchmarks import suite
    from benchmarks.report import render

    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    monkeypatch.setattr(suite, "ROOT", tmp_path)
    run = suite.Run(Settings(), str(tmp_path), log=lambda _m: None)
    part = suite.part_plugin(run, "benchmarks.no_such_module", "*cost*model*.json")
    assert part == {
        "skipped": "not run in this suite (benchmarks.no_such_module is not available yet)"
    }
    rows = [{"split": "chronological", "pairwise": 0.81, "recall@30": 0.6}]
    (tmp_path / "2026-01-01-h-cost-model.json").write_text(json.dumps({"metrics": rows}))
    part = suite.part_plugin(run, "benchmarks.no_such_module", "*cost*model*.json")
    assert part["source"] == "2026-01-01-h-cost-model.json"
    text = render({"cost-model": part}, {})
    assert "| split | pairwise | recall@30 |" in text and "| chronological | 0.81 | 0.6 |" in text
