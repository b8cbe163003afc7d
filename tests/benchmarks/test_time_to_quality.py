"""The time-to-quality benchmark's arithmetic: the model-latency curve and the summary."""

from __future__ import annotations

import pytest

from benchmarks.time_to_quality import RunResult, model_latency_curve, summarize, table


def test_curve_starts_when_every_task_is_measured_and_only_falls() -> None:
    weights = {"a": 2, "b": 1}
    events = [
        (1.0, "a", 10.0),  # b not measured yet: no model latency
        (2.0, "b", 5.0),  # 2 x 10 + 5
        (3.0, "a", 12.0),  # worse than a's best: no point
        (4.0, "b", 0.0),  # a failed measurement (no time): ignored
        (5.0, "x", 1.0),  # not a task of the model
        (6.0, "a", 4.0),  # 2 x 4 + 5
    ]
    assert model_latency_curve(events, weights) == [(2.0, 25.0), (6.0, 13.0)]
    assert model_latency_curve(events[:1], weights) == []


def _run(variant: str, seed: int, curve: list[tuple[float, float]], wall: float) -> RunResult:
    return RunResult("w", variant, seed, wall, 8, curve, {"search": wall / 10})


def test_summary_times_to_levels_of_the_best_any_run_found() -> None:
    runs = [
        _run("tunefarm", 0, [(1.0, 20.0), (3.0, 10.0)], 4.0),
        _run("tunefarm", 1, [(1.0, 20.0), (2.0, 10.6)], 4.0),
        _run("stock", 0, [(2.0, 30.0), (6.0, 10.4)], 8.0),
        _run("stock", 1, [(2.0, 30.0)], 8.0),  # never within 90%: counts its wall time
    ]
    out = summarize(runs)
    assert out["best_sec"] == 10.0
    tf, stock = out["variants"]["tunefarm"], out["variants"]["stock"]
    assert tf["to_90"]["reached"] == "2/2" and tf["to_90"]["median"] == pytest.approx(2.5)
    assert tf["to_95"]["reached"] == "1/2"  # 10.6 > 10 / 0.95
    assert stock["to_90"]["reached"] == "1/2" and stock["to_90"]["median"] == pytest.approx(7.0)
    assert tf["vs_stock"]["to_90"]["ratio"] == pytest.approx(2.5 / 7.0)
    # stock's median final latency is 20.2 (10.4 and 30.0): both TuneFarm runs had it at 1 s
    assert tf["to_stock"]["reached"] == "2/2" and tf["to_stock"]["median"] == pytest.approx(1.0)
    assert stock["to_stock"]["reached"] == "1/2"  # 30.0 never was: its whole 8 s
    assert stock["to_stock"]["median"] == pytest.approx(7.0)
    assert tf["vs_stock"]["to_stock"]["ratio"] == pytest.approx(1.0 / 8.0)
    assert tf["search_share"]["median"] == pytest.approx(0.1)
    assert tf["final_sec"]["median"] == pytest.approx(10.3)


def test_table_reports_device_busy_and_a_warm_run_against_the_cold_one() -> None:
    runs = [
        RunResult("w", "tunefarm", 0, 10.0, 8, [(2.0, 10.0)], {"search": 1.0}, 0.5),
        RunResult("w", "tunefarm-warm", 0, 12.0, 8, [(1.0, 10.0)], {"search": 1.0}, 0.7),
        RunResult("w", "stock", 0, 20.0, 8, [(4.0, 10.0)]),
    ]
    summary = summarize(runs)
    assert summary["variants"]["tunefarm-warm"]["device_busy"]["median"] == pytest.approx(0.7)
    assert "device_busy" not in summary["variants"]["stock"]
    rows = {
        line.split(" | ")[1]: line
        for line in table({"workloads": {"w": {"summary": summary}}}).splitlines()[2:]
    }
    warm_row = "| 0.25x | 0.25x (1/1 vs 1/1) | - | 1.20x; by seed 1.20x [1.20-1.20] |"
    assert rows["tunefarm-warm"].endswith(warm_row)
    # no seed ran both: the ratio of medians alone
    summary["variants"]["tunefarm-warm"]["wall_vs_cold"] = None
    unpaired = table({"workloads": {"w": {"summary": summary}}}).splitlines()[3]
    assert unpaired.endswith("| - | 1.20x |")
    assert rows["tunefarm"].endswith("| 8 | 10% | 50% | 0.50x | 0.50x (1/1 vs 1/1) | - | - |")
    assert rows["stock"].endswith("| 8 | - | - | - | - | - | - |")
    # at equal wall time a warm job's wall over the cold one's says nothing
    wall = table({"budget": "wall", "workloads": {"w": {"summary": summary}}})
    assert wall.splitlines()[3].endswith("| 0.25x | 0.25x (1/1 vs 1/1) | - | - |")


def test_a_warm_variants_wall_time_is_compared_with_the_cold_one_seed_by_seed() -> None:
    walls = {"tunefarm": (40.0, 44.0, 56.0), "tunefarm-warm": (44.0, 40.0, 50.0, 90.0)}
    runs = [
        RunResult("w", variant, seed, wall, 8, [(1.0, 10.0)], {"search": 1.0})
        for variant, secs in walls.items()
        for seed, wall in enumerate(secs)
    ]
    summary = summarize(runs)
    vs = summary["variants"]["tunefarm-warm"]["wall_vs_cold"]
    # seeds 0-2 only (seed 3 has no cold run): 1.1, 0.909, 0.893
    assert vs["median"] == pytest.approx(40.0 / 44.0)
    assert vs["q1"] < vs["median"] < vs["q3"] < 1.1
    row = table({"workloads": {"w": {"summary": summary}}}).splitlines()[3]
    # the ratio of medians (47 / 44: one slow warm run moves it) beside the seeds'
    assert row.endswith(f"| 1.07x; by seed 0.91x [{vs['q1']:.2f}-{vs['q3']:.2f}] |")


def test_wall_budget_runs_stock_first_and_needs_it() -> None:
    from benchmarks.time_to_quality import main

    with pytest.raises(SystemExit):  # argparse's usage error: no stock, no wall budget
        main(["--budget", "wall", "--variants", "tunefarm", "--seeds", "0"])


def test_a_history_is_built_for_each_seed_unless_asked_for_one() -> None:
    from benchmarks.time_to_quality import build_parser

    assert build_parser().parse_args([]).history_per_seed is True
    assert build_parser().parse_args(["--no-history-per-seed"]).history_per_seed is False


def test_history_depth_is_validated() -> None:
    from benchmarks.time_to_quality import main

    with pytest.raises(SystemExit):  # a history of no trials is a usage error
        main(["--history-trials-per-task", "0"])


def test_retimed_finals_are_compared_with_stock() -> None:
    """The side-by-side re-timing of the final schedules gets its own column and ratio."""
    from dataclasses import replace

    runs = [
        replace(_run("tunefarm", 0, [(1.0, 10.0)], 4.0), retimed_sec=8e-6),
        replace(_run("stock", 0, [(2.0, 12.0)], 8.0), retimed_sec=1e-5),
    ]
    summary = summarize(runs)
    tf = summary["variants"]["tunefarm"]
    assert tf["vs_stock"]["retimed_sec"]["ratio"] == pytest.approx(0.8)
    row = table({"workloads": {"w": {"summary": summary}}}).splitlines()[2]
    assert "| 8.0 us [8.0-8.0] |" in row and "| 0.80x |" in row


def test_retime_times_each_runs_final_schedules(llvm_target) -> None:
    """Real kernels: a run's model latency is the weighted sum of its kernels' times; a run
    missing a task's schedule has none."""
    import tvm
    from tvm import te

    from benchmarks.time_to_quality import retime

    a = te.placeholder((256, 256), name="A")
    b = te.compute((256, 256), lambda i, j: a[i, j] * 2.0, name="B")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b])})
    out = retime([[mod, mod], [mod, None]], [3, 1], llvm_target, rounds=2)
    assert out[0] is not None and out[0] > 0 and out[1] is None


def test_warm_variants_are_compared_with_their_cold_counterpart() -> None:
    from benchmarks.time_to_quality import WARM_VARIANTS, cold_counterpart

    assert cold_counterpart("tunefarm-warm") == "tunefarm"
    assert cold_counterpart("tunefarm-warm-transfer") == "tunefarm"
    assert cold_counterpart("tunefarm-warm-g4") == "tunefarm-g4"
    assert all(not cold_counterpart(v).startswith("tunefarm-warm") for v in WARM_VARIANTS)


def test_head_to_head_judges_a_variant_by_its_and_stocks_best_only() -> None:
    """A warm run's best sets the all-runs bar out of the cold runs' reach; head to head the
    cold run is judged against stock by the best of the two alone."""
    runs = [
        _run("tunefarm", 0, [(1.0, 20.0), (3.0, 10.0)], 5.0),
        _run("tunefarm-warm", 0, [(1.0, 4.0)], 5.0),
        _run("stock", 0, [(2.0, 30.0), (6.0, 10.5)], 8.0),
    ]
    out = summarize(runs)
    cold = out["variants"]["tunefarm"]
    assert cold["to_90"]["reached"] == "0/1"  # 90% of the warm run's 4.0
    pair = cold["head_to_head"]
    assert pair["best_sec"] == 10.0
    assert pair["to"]["median"] == pytest.approx(3.0)  # 10.0 <= 10 / 0.9
    assert pair["stock_to"]["median"] == pytest.approx(6.0)  # 10.5 <= 11.1
    assert pair["vs_stock"]["ratio"] == pytest.approx(0.5)
    warm = out["variants"]["tunefarm-warm"]["head_to_head"]
    assert warm["stock_to"]["reached"] == "0/1" and warm["vs_stock"]["ratio"] == pytest.approx(
        1.0 / 8.0
    )
    rows = table({"workloads": {"w": {"summary": out}}}).splitlines()
    assert "| 0.50x (1/1 vs 1/1) |" in rows[2]


def test_stock_long_gives_stocks_time_to_a_level_its_own_run_never_reached() -> None:
    """Stock's own run never reaches 90% of the best: its figure is its wall time (a bound).
    Given 4x the trials (stock-long), it gets there at 20 s: each variant's time to the level
    is also given over that, and the report has the table."""
    from benchmarks.time_to_quality import long_table

    runs = [
        _run("stock", 0, [(2.0, 30.0), (8.0, 20.0)], 8.0),
        _run("tunefarm", 0, [(1.0, 20.0), (5.0, 10.0)], 8.0),
        _run("stock-long", 0, [(2.0, 30.0), (8.0, 20.0), (20.0, 10.5)], 32.0),
    ]
    out = summarize(runs)
    stock, long = out["variants"]["stock"], out["variants"]["stock-long"]
    assert stock["to_90"]["reached"] == "0/1" and stock["to_90"]["median"] == 8.0
    assert long["to_90"]["reached"] == "1/1" and long["to_90"]["median"] == pytest.approx(20.0)
    vs = out["variants"]["tunefarm"]["vs_stock"]
    assert vs["to_90"]["ratio"] == pytest.approx(5.0 / 8.0)  # against the bound
    assert vs["to_90_long"]["ratio"] == pytest.approx(5.0 / 20.0)  # against when it got there
    assert "to_90_long" not in long.get("vs_stock", {})
    rows = long_table({"workloads": {"w": {"summary": out}}}).splitlines()
    assert [r.split(" | ")[1] for r in rows[2:]] == ["stock", "tunefarm"]
    assert "| 0.25x |" in rows[3] and "| 0.40x |" in rows[2]  # stock: 8 s (bound) / 20 s
    assert long_table({"workloads": {"w": {"summary": summarize(runs[:2])}}}) == ""


def test_summarize_rewrites_a_results_files_summary_from_its_runs(tmp_path) -> None:
    import json
    from dataclasses import asdict

    from benchmarks.time_to_quality import main

    runs = [
        _run("tunefarm", 0, [(1.0, 20.0), (3.0, 10.0)], 5.0),
        _run("stock", 0, [(2.0, 30.0), (6.0, 10.5)], 8.0),
    ]
    path = tmp_path / "r.json"
    results = {
        "date": "d",
        "machine": {},
        "seeds": 1,
        "trials_per_task": 8,
        "budget": "wall",
        "workloads": {"w": {"summary": {}, "plot": "r-w.png", "runs": [asdict(r) for r in runs]}},
    }
    path.write_text(json.dumps(results))
    report = tmp_path / "r.md"
    assert main(["--summarize", str(path), "--report", str(report)]) == 0
    again = json.loads(path.read_text())
    assert again["workloads"]["w"]["summary"]["best_sec"] == 10.0
    kept = json.loads(json.dumps(results))["workloads"]["w"]["runs"]
    assert again["workloads"]["w"]["runs"] == kept  # the runs as they were
    assert "head to head" in report.read_text()
    (tmp_path / "bad.json").write_text("{}")
    assert main(["--summarize", str(tmp_path / "bad.json"), "--report", str(report)]) == 1


def test_the_report_is_a_section_that_keeps_the_rest_of_its_file(tmp_path) -> None:
    """``make bench`` writes the suite's report, then this run's section into it: the
    section replaces the last run's and leaves the rest (a hand-written history) alone."""
    from benchmarks.time_to_quality import BEGIN, END, write_report

    runs = [
        _run("tunefarm", 0, [(1.0, 20.0), (3.0, 10.0)], 5.0),
        _run("stock", 0, [(2.0, 30.0), (6.0, 10.5)], 8.0),
    ]
    results = {
        "date": "d1",
        "machine": {"hostname": "h"},
        "seeds": 1,
        "trials_per_task": 8,
        "workloads": {"w": {"summary": summarize(runs), "plot": "r-w.png"}},
    }
    report = tmp_path / "performance.md"
    report.write_text("# Performance report\n\nthe suite's tables\n")
    write_report(results, tmp_path / "r.json", report)
    write_report(results | {"date": "d2"}, tmp_path / "r.json", report)
    text = report.read_text()
    assert text.startswith("# Performance report\n\nthe suite's tables\n")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "date d2" in text and "date d1" not in text
    assert "## Time to a fast model" in text and "![w](r-w.png)" in text
    fresh = tmp_path / "new.md"  # no file yet: the section alone
    write_report(results, tmp_path / "r.json", fresh)
    assert fresh.read_text().startswith(BEGIN)
    # where the warm runs' history came from: once for the run, or one for each seed
    results["workloads"]["w"]["history"] = [["examples/mlp_dynamic.py", {"b": [16]}]]
    for per_seed, says in ((False, "built before the seeds"), (True, "one built before each")):
        write_report(results | {"history_per_seed": per_seed}, tmp_path / "r.json", fresh)
        assert f"`examples/mlp_dynamic.py` at b=[16] (cold jobs of 8 trials per task, {says}" in (
            fresh.read_text()
        )


def test_times_are_also_given_on_the_re_timed_scale() -> None:
    """A tuner whose runner times 2x faster than the side-by-side re-timing looks 2x better
    on its own curve; on the re-timed scale its curve is scaled back."""
    from dataclasses import replace

    from benchmarks.time_to_quality import on_retimed_scale, retimed_table

    runs = [
        replace(_run("tunefarm", 0, [(1.0, 10.0), (3.0, 5.0)], 5.0), retimed_sec=10.0),
        replace(_run("stock", 0, [(2.0, 30.0), (6.0, 10.0)], 8.0), retimed_sec=10.0),
    ]
    assert on_retimed_scale(runs)[0].curve == [(1.0, 20.0), (3.0, 10.0)]
    out = summarize(runs)
    # own scale: stock never within 90% of 5.0; re-timed: both end at 10.0
    assert out["variants"]["stock"]["to_90"]["reached"] == "0/1"
    scaled = out["retimed_scale"]["variants"]
    assert scaled["stock"]["to_90"]["median"] == pytest.approx(6.0)
    assert scaled["tunefarm"]["to_90"]["median"] == pytest.approx(3.0)
    assert scaled["tunefarm"]["vs_stock"]["to_90"]["ratio"] == pytest.approx(0.5)
    assert "retimed_scale" not in out["retimed_scale"]  # one level deep
    text = retimed_table({"workloads": {"w": {"summary": out}}})
    assert "| w | tunefarm | 3.0 s [3.0-3.0] (1/1) |" in text
    # runs not re-timed: no such figures
    plain = summarize([replace(r, retimed_sec=None) for r in runs])
    assert "retimed_scale" not in plain
    assert retimed_table({"workloads": {"w": {"summary": plain}}}) == ""
