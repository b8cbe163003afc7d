"""Issue 19: the bucket planner, the planned trial split in the job, bench over a profile.

Real TVM models, real SQLite files; one real (tiny) tune on a local Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database import Storage, TuneFarmDatabase
from tests.cli_assert import one_line_error
from tuner.bench.results import BenchResult, traffic_summary, weighted_quantile
from tuner.cli import app
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.planner import Calibration, Planner
from tuner.planner.curves import CONTRACTION_SEARCH, GainCurve, family_curve
from tuner.planner.kernels import KernelModel, TaskModel
from tuner.symbolic.buckets import bucket_tasks
from tuner.symbolic.dispatch.rule import BucketKernel, PadBuffer, choose_intervals, pick_kernel
from tuner.symbolic.profile import ShapeProfile

runner = CliRunner()
MLP = Path(__file__).parents[2] / "examples" / "mlp_dynamic.py"

ROWS = '''"""x[n, 64] @ w[64, 64], relu: one symbolic kernel (n <= 64)."""
import numpy as np
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 64), "float32")):
        R.func_attr({"tir_var_upper_bound": {"n": 64}})
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            R.output(y)
        return y


def numpy_reference(x, w):
    return np.maximum(x @ w, 0.0)
'''


def test_an_exact_kernel_yields_only_to_a_kernel_estimated_clearly_faster() -> None:
    """At its own bucket an exact kernel (measured there) keeps the value unless another
    bucket's kernel, whose cost there is extrapolated, is estimated GENERIC_MARGIN times
    cheaper; its own bucket's range kernel, timed there too, wins on the lesser time."""
    buffers = (PadBuffer(64, 1), PadBuffer(64, 1, output=True))
    exact = BucketKernel(16, 1, "k16x", "", 13.4e-6, static=True)
    for sec_at_64, wins in ((49.6e-6, False), (30e-6, True)):  # 12.4 us at 16, then 7.5 us
        fine = BucketKernel(64, 1, "k64", "", sec_at_64)
        kernels = (exact, fine)
        assert fine.cost(16, 1, buffers) < exact.cost(16, 1, buffers)
        assert pick_kernel(kernels, (), 1, buffers, 16) is (fine if wins else exact)
        intervals = choose_intervals(kernels, (), 1, buffers)
        assert next(bk for upper, bk in intervals if upper >= 16) is (fine if wins else exact)
    # the bucket's own range kernel was timed at 16 too: the lesser time wins, no margin
    own = BucketKernel(16, 1, "k16", "", 12.8e-6)
    assert pick_kernel((exact, own), (), 1, buffers, 16) is own


def test_gain_curve() -> None:
    c = GainCurve(0.1, 4.0, "test")
    assert c.ratio(0) == 1.0 and c.ratio(1) == 1.0
    assert 0.1 < c.ratio(8) < c.ratio(4) < 1.0 and abs(c.ratio(1000) - 0.1) < 1e-9


def test_a_contraction_far_from_its_roofline_jumps(tmp_path: Path, llvm_target) -> None:
    from tuner.planner.curves import JUMP_MIN

    jump = GainCurve(0.01, 8.0, "jump", log=True)
    assert jump.ratio(0) == 1.0 and jump.ratio(1) == 1.0
    # most of the speed-up, in orders of magnitude, at the second trial (GPT-2's matmuls:
    # 1.0, 0.027, 0.019 at trials 1-3, 0.013 at 32), then closing in on the floor as a
    # contraction's search does
    assert 0.01 < jump.ratio(16) < jump.ratio(4) < jump.ratio(3) < jump.ratio(2) < 0.1
    assert jump.ratio(2) == pytest.approx(0.01 * CONTRACTION_SEARCH.mean(2))
    assert jump.ratio(64) == pytest.approx(0.01, rel=0.01)
    # from an empty database, the MLP's matmuls (untuned defaults far off their roofline)
    # follow it: two trials are worth most of the gain in orders of magnitude, and a search
    # of 16 trials still runs far faster than one of 4
    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'empty.db'}"))
    profile = ShapeProfile(("b",), (((30,), 1),))
    planner = Planner(model.mod, llvm_target, db, profile, model.shape_vars)
    tasks = [t for k in planner.kernels.values() for t in k.at.values()]
    jumping = [t for t in tasks if t.curve.log]
    assert jumping and all(t.cls == "contraction" for t in jumping)
    for t in jumping:
        assert t.curve.floor * JUMP_MIN <= 1.0
        assert t.time(2) < t.default_est / 1.4
        assert t.time(4) > 2.0 * t.time(16)


def test_a_contraction_search_closes_in_as_measured() -> None:
    """The residual of a contraction's search (best so far over where it ends) follows the
    MLP's 30 measured histories: median 3.05x after 2 records, 1.92x after 4, 1.58x after 8,
    1.17x after 12, 1.05x after 16; means 6.67x, 3.00x, 1.82x, 1.43x, 1.11x."""
    s = CONTRACTION_SEARCH
    medians = {2: 3.05, 4: 1.92, 8: 1.58, 12: 1.17, 16: 1.05}
    means = {2: 6.67, 4: 3.00, 8: 1.82, 12: 1.43, 16: 1.11}
    for t, m in medians.items():
        assert s.median(t) == pytest.approx(m, rel=0.15), t
        assert s.mean(t) == pytest.approx(means[t], rel=0.25), t
    assert s.spread(2) > s.spread(8) > s.spread(16) > 0.2  # a short search strays far
    assert s.ahead(8, 8) == 1.0 and s.ahead(8, 4) == 1.0  # no record is taken back
    assert s.ahead(4, 16) == pytest.approx(s.median(16) / s.median(4))
    # a task past its jump: a contraction's search goes on, a layer norm's tail is slow
    from tuner.planner.curves import TAIL_CURVES, tail_ratio

    assert tail_ratio("contraction", 4, 16) < 0.6
    assert tail_ratio("reduction", 4, 16) == pytest.approx(TAIL_CURVES["reduction"].ratio(13))


def test_calibration_bucket_factors_follow_the_value() -> None:
    # a large bucket's kernel ran at 0.3x its figure padded down to b=8 and at 1.0x near its
    # bucket: interpolated between, held beyond, and above the bucket without timings there
    cal = Calibration(
        (8, 200), (1e-6, 1e-6), (1e-6, 1e-6), (0.0, 0.0), bucket={"k": ((8, 0.3), (200, 1.0))}
    )
    assert cal.bucket_factor("k", 8, above=False) == pytest.approx(0.3)
    assert cal.bucket_factor("k", 104, above=False) == pytest.approx(0.65)
    assert cal.bucket_factor("k", 300, above=True) == pytest.approx(1.0)
    assert cal.bucket_factor("other", 8, above=False) == 1.0
    assert sorted(cal.factors()) == [0.3, 1.0]


def test_a_family_curve_is_its_buckets_measured_curve_then_its_search_going_on() -> None:
    # two buckets' histories (best / default after each record), one shorter
    curve = family_curve([[1.0, 0.1, 0.05, 0.04], [1.0, 0.3, 0.2]], "contraction", "family, 2")
    assert curve.ratio(0) == 1.0 and curve.ratio(1) == 1.0
    assert curve.ratio(2) == pytest.approx(0.2)  # the median of 0.1 and 0.3
    # the short history is continued as a contraction's search goes on: 0.2 then less
    assert curve.ratio(4) == pytest.approx((0.04 + 0.2 * CONTRACTION_SEARCH.ahead(3, 4)) / 2)
    # past the longest history: the same from the last point
    last = curve.ratio(4)
    assert curve.ratio(40) == pytest.approx(last * CONTRACTION_SEARCH.ahead(4, 40))
    assert curve.ratio(40) < curve.ratio(8) < last
    # a layer norm's family: its slow tail, never below its floor of the last point
    from tuner.planner.curves import TAIL_CURVES

    norm = family_curve([[1.0, 0.8, 0.7]], "reduction", "family, 1")
    tail = TAIL_CURVES["reduction"]
    assert 0.7 * tail.floor < norm.ratio(40) < norm.ratio(8) < 0.7


def test_a_task_past_its_jump_expects_its_search_to_go_on_not_the_fitted_jump() -> None:
    import tvm
    from tvm import te

    a = te.placeholder((16, 64), name="A")
    w = te.placeholder((64, 64), name="W")
    k = te.reduce_axis((0, 64), name="k")
    mm = te.compute((16, 64), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, w, mm])})
    # a task with 8 records whose best is already 60x its default: the family's curve
    # (fitted to matmuls that jumped 100x in two trials) must not promise another 2x
    steep = GainCurve(0.005, 2.0, "contraction, 2 histories")
    tm = TaskModel("k", 16, 1, mod, 1e6, recorded=8, best_sec=10e-6)
    tm.default_est, tm.curve, tm.floor_sec = 600e-6, steep, 0.0
    assert tm.time(8) == pytest.approx(10e-6)
    assert 10e-6 * CONTRACTION_SEARCH.ahead(8, 11) == pytest.approx(tm.time(11))
    assert tm.time(11) > 8e-6  # the fitted curve's own promise: 2.6x faster
    # a task behind its curve (no gain yet in 2 records) still expects the jump
    behind = TaskModel("k", 16, 1, mod, 1e6, recorded=2, best_sec=600e-6)
    behind.default_est, behind.curve, behind.floor_sec = 600e-6, steep, 0.0
    assert behind.time(10) < 60e-6


def test_calibration_corrects_each_kernel_by_the_timed_build(tmp_path: Path, llvm_target) -> None:
    from tuner.cli.render import plan_notes
    from tuner.kernel_profile import KernelProfile, KernelTime

    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'empty.db'}"))
    profile = ShapeProfile(("b",), (((8,), 50), ((30,), 50)))
    planner = Planner(model.mod, llvm_target, db, profile, model.shape_vars)
    # the build's functions, named as the build names them, map to the model's kernels
    assert planner._attribute("fused_matmul_add_gelu") == ("generic", "fused_matmul_add_gelu")
    assert planner._attribute("fused_matmul1_add1_b16_static") == ("bucket", "fused_matmul1_add1")
    assert planner._attribute("fused_matmul_add_gelu_b8_at4_exact")[1] == "fused_matmul_add_gelu"
    assert planner._attribute("tunefarm_pad0") is None
    # nothing tuned: the build runs generic code everywhere; timed at 8 and 30, the generic
    # kernels took 3x and 1.5x the model's figure, and 20 us went outside them (a pad too)
    chosen, statics = planner.before()
    base = planner.latency(chosen, statics, at=[8, 30])
    generic = {
        v: {km.name: km.calls * km.generic(v) for km in planner.kernels.values()} for v in (8, 30)
    }

    def timed(v: int, factor: float) -> KernelProfile:
        kernels = [KernelTime(n, 1, factor * t) for n, t in generic[v].items()]
        kernels.append(KernelTime("tunefarm_pad0", 1, 5e-6))
        return KernelProfile(factor * sum(generic[v].values()) + 20e-6, tuple(kernels), 30)

    cal = planner.calibrate({8: timed(8, 3.0), 30: timed(30, 1.5)})
    assert cal.values == (8, 30) and cal.modelled_sec == pytest.approx(tuple(base))
    assert cal.rest_sec == pytest.approx((20e-6, 20e-6))  # the pad is outside the model's
    name = "fused_matmul_add_gelu"
    assert cal.generic[name] == ((8, pytest.approx(3.0)), (30, pytest.approx(1.5)))
    assert cal.generic_factor(name, 19) == pytest.approx(2.25)  # interpolated
    assert cal.generic_factor(name, 100) == pytest.approx(1.5)  # held
    # the planner now prices with it: the timed build is predicted at its measured time
    got = planner.latency(chosen, statics, at=[8, 30])
    for v, f, x in zip((8, 30), (3.0, 1.5), got, strict=True):
        assert x == pytest.approx(timed(v, f).model_sec)
    # ... and so does the plan (figures and choice), which keeps the uncalibrated figure
    plan = planner.plan(24)
    assert plan.calibration == cal and plan.kernel_after_sec < plan.after_sec
    again = planner.plan(24, measured={8: timed(8, 3.0), 30: timed(30, 1.5)})
    assert again.calibration == cal and again.after_sec == pytest.approx(plan.after_sec)
    assert (
        "timed at 2 values (b=8..30): its kernels ran at 1.50-3.00x the model's time"
        in (plan_notes(plan)[-1])
    )
    with pytest.raises(ValueError, match="one measured"):
        Calibration((8, 16), (1e-6,), (1e-6,), (0.0,))
    with pytest.raises(ValueError, match="increasing"):
        Calibration((16, 8), (1e-6, 1e-6), (1e-6, 1e-6), (0.0, 0.0))
    with pytest.raises(ValueError, match="factors must be positive"):
        Calibration((8,), (1e-6,), (1e-6,), (0.0,), bucket={"k": ((8, 0.0),)})


def _result(n: int, tuned: float, untuned: float, ref: float) -> BenchResult:
    return BenchResult(
        untuned_sec=untuned,
        tuned_sec=tuned,
        numpy_sec=ref,
        max_abs_err=0.0,
        reference="numpy",
        agree=True,
        tuned_share=1.0,
        untuned_kernels=[],
        shape={"n": n},
        kernels={},
        reference_sec=ref,
    )


def test_traffic_weighted_mean_and_percentiles() -> None:
    assert weighted_quantile([3.0, 1.0, 2.0], [0.2, 0.5, 0.3], 0.5) == 1.0
    assert weighted_quantile([3.0, 1.0, 2.0], [0.2, 0.5, 0.3], 0.99) == 3.0
    results = [_result(1, 1e-6, 4e-6, 2e-6), _result(8, 5e-6, 40e-6, 6e-6)]
    summary = traffic_summary(results, [0.9, 0.1], "p")
    tuned = summary.stats["tuned"]
    assert tuned.mean_sec == pytest.approx(0.9 * 1e-6 + 0.1 * 5e-6)
    assert tuned.p50_sec == 1e-6 and tuned.p99_sec == 5e-6
    assert set(summary.stats) == {"tuned", "untuned", "numpy"}
    assert summary.to_dict()["tuned_speedup_mean"] == pytest.approx(
        (0.9 * 4e-6 + 0.1 * 40e-6) / (0.9 * 1e-6 + 0.1 * 5e-6)
    )
    with pytest.raises(TuneFarmError):
        traffic_summary(results, [1.0], "p")


def test_plan_from_priors_respects_the_budget(tmp_path: Path, llvm_target) -> None:
    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'empty.db'}"))
    narrow = ShapeProfile(("b",), tuple(((v,), 100) for v in range(20, 41)))
    planner = Planner(model.mod, llvm_target, db, narrow, model.shape_vars)
    plan = planner.plan(24)
    assert len(plan.buckets) >= 1 and plan.trials <= 24
    assert all(t.trials >= 1 for t in plan.tasks)
    names = {bt.task.name for bt in bucket_tasks(model.mod, llvm_target, {"b": list(plan.buckets)})}
    assert {t.name for t in plan.tasks} == names  # the job's own task names
    assert plan.after_sec < plan.before_sec == plan.untuned_sec  # nothing recorded yet
    assert sum(r.share for r in plan.rows) == pytest.approx(1.0)
    # the traffic is at 20..40: some bucket covers it, none far below it serves it
    assert any(20 <= b <= 64 for b in plan.buckets)
    with pytest.raises(TuneFarmError, match="cannot measure even the default schedules"):
        planner.plan(1)
    # nothing is recorded: counting only the new records plans the same
    assert planner.plan(24, new_only=True).task_trials() == plan.task_trials()


def test_a_plan_shows_each_tasks_convergence_from_the_latest_job(
    tmp_path: Path, llvm_target
) -> None:
    """A planned task a job stored shows that job's converged / expected gain; others None."""
    from database.jobs import record_job_tasks, start_job
    from tuner.cli.render import plan_tables
    from tuner.job.tasks import job_tasks

    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'conv.db'}"))
    narrow = ShapeProfile(("b",), tuple(((v,), 100) for v in range(20, 41)))
    planner = Planner(model.mod, llvm_target, db, narrow, model.shape_vars)
    plan = planner.plan(24)
    assert all(t.converged is None and t.expected_gain is None for t in plan.tasks)
    found = job_tasks(model.mod, llvm_target, db, {"b": list(plan.buckets)})
    first = found.tasks[0]
    wid = db.workload_id(first.mod)
    job = start_job(db.storage, name="j", target_json="{}", budget=8)
    row = {
        "workload_id": wid, "name": first.name, "weight": 1, "trials": 8, "best_sec": 1e-4,
        "baseline_sec": 2e-4, "expected_gain": 0.04, "converged": False, "converged_at": None,
    }  # fmt: skip
    record_job_tasks(db.storage, job, [row])
    again = Planner(model.mod, llvm_target, db, narrow, model.shape_vars).plan(24)
    shown = {t.name: (t.converged, t.expected_gain) for t in again.tasks}
    assert shown[first.name] == (False, 0.04)
    assert all(v == (None, None) for name, v in shown.items() if name != first.name)
    assert {"converged": False, "expected_gain": 0.04}.items() <= next(
        t for t in again.to_dict()["tasks"] if t["name"] == first.name
    ).items()
    cells = [str(c._cells) for c in plan_tables(again)[1].columns if c.header == "converged"]
    assert "no (+4% expected)" in cells[0] and "—" in cells[0]


def test_outcome_draws_have_mean_one_the_spread_asked_and_a_fixed_order() -> None:
    import numpy as np

    from tuner.planner.curves import SPREAD_SAMPLES
    from tuner.planner.latency import _outcomes

    draws = _outcomes(32, 0.25)
    assert draws.shape == (SPREAD_SAMPLES,) and draws.mean() == pytest.approx(1.0)
    assert np.log(draws).std() == pytest.approx(0.25, rel=0.1)
    assert list(draws) == list(_outcomes(32, 0.25))  # a set's price is the same every time
    assert list(draws) != list(_outcomes(40, 0.25))  # another search, another order
    assert np.allclose(_outcomes(8, 0.0), 1.0)


def test_buckets_that_serve_the_same_values_are_priced_as_the_best_of_their_searches(
    tmp_path: Path, llvm_target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where two buckets' kernels can serve a value and their searches are still to run, the
    value costs the expected fastest of them (the dispatch runs whichever came out best);
    one bucket alone, or searches already run, are priced as the curve says."""
    import tuner.planner.kernels as planner_mod

    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'empty.db'}"))
    narrow = ShapeProfile(("b",), tuple(((v,), 100) for v in range(20, 41)))

    def price(spread: float, buckets: tuple[int, ...], recorded: int = 0) -> float:
        monkeypatch.setattr(
            planner_mod,
            "SEARCH_SPREAD",
            dict.fromkeys(("contraction", "reduction", "injective"), spread),
        )
        planner = Planner(model.mod, llvm_target, db, narrow, model.shape_vars)
        for km in planner.kernels.values():
            for tm in km.at.values():
                tm.recorded = recorded
        # 12 records a task: the split itself gives a short second search nothing (priced
        # by how far such a search still is from its end, CONTRACTION_SEARCH)
        chosen = {name: dict.fromkeys(buckets, 12) for name in planner.kernels}
        return planner.expected(chosen, dict.fromkeys(planner.statics, 1))

    assert price(0.25, (40,)) == pytest.approx(price(0.0, (40,)))
    assert price(0.25, (32, 40)) < 0.95 * price(0.0, (32, 40))
    assert price(0.5, (32, 40)) < price(0.25, (32, 40))  # the wider, the more the best gains
    # searches already run: their bests are measured, nothing is left to chance
    assert price(0.25, (32, 40), recorded=2) == pytest.approx(price(0.0, (32, 40), recorded=2))


def test_a_plan_spends_its_whole_budget_past_the_curves_floor(tmp_path: Path, llvm_target) -> None:
    """Where the curves predict no more gain (tasks at their floor), the trials left go to the
    tasks by the traffic they serve: a plan of N trials is N trials, as the user asked."""
    model = load_model(MLP)
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'empty.db'}"))
    low = [((v,), 120) for v in range(6, 11)]
    high = [((v,), 40) for v in range(190, 211)]
    bimodal = ShapeProfile(("b",), tuple(low + high))
    planner = Planner(model.mod, llvm_target, db, bimodal, model.shape_vars)
    cand = planner.candidates  # the old greedy split left 8 of 64 on (256,)
    for buckets in ((8, cand[-1]), (cand[-1],), (8, *cand[-2:])):
        found = planner.split(buckets, 64)
        assert found is not None
        chosen, statics, _ = found
        spent = sum(sum(c.values()) for c in chosen.values()) + sum(statics.values())
        assert spent == 64, (buckets, chosen)
    assert planner.plan(64).trials == 64


def test_stages_share_the_new_trials(tmp_path: Path) -> None:
    from tuner.services import stage_budgets

    assert stage_budgets(64, 2) == [32, 32]
    assert stage_budgets(5, 3) == [2, 2, 1]
    assert stage_budgets(1, 2) == [1]
    profile = tmp_path / "p.csv"
    profile.write_text("var,value,count\nb,20,5\n")
    args = ["tune", str(MLP), "--shape-profile", str(profile), "--stages", "0"]
    one_line_error(runner.invoke(app, args), "--stages must be at least 1")


def test_range_kernels_are_priced_by_their_measured_ratio_to_the_static_kernel() -> None:
    """A bucket's range kernel and fine variant cost what the tune measured them at over
    the static kernel (as the build prices them), a bucket never timed the kernel's median
    ratio, a kernel never timed 1."""
    import tvm
    from tvm import te

    a = te.placeholder((16, 64), name="A")
    mod = tvm.IRModule(
        {"main": te.create_prim_func([a, te.compute((16, 64), lambda i, j: a[i, j])])}
    )
    km = KernelModel("k", 1)
    for value, ratios in {8: (1.2, 1.8), 16: (1.4, None), 32: (None, None)}.items():
        km.at[value] = TaskModel("k", value, 1, mod, 1e6, recorded=4, best_sec=1e-5)
        km.at[value].range_ratio, km.at[value].fine_ratio = ratios
    assert km.range_ratios(8) == (1.2, 1.8)
    assert km.range_ratios(16) == (1.4, 1.8)  # its fine variant untimed: the others'
    assert km.range_ratios(32) == (pytest.approx(1.3), 1.8)
    assert km.range_ratios(64) == (pytest.approx(1.3), 1.8)  # no task there yet
    assert KernelModel("j", 1).range_ratios(8) == (1.0, 1.0)


def test_a_timed_range_kernel_is_offered_whatever_its_tile_as_the_build_offers_it() -> None:
    """The tile-1 rule keeps an untimed range kernel of tile 1 over two axes of the variable
    out of the dispatch; once the tune timed it at its bucket, the build offers it at its
    measured price, and so does the planner's model of that build."""
    import tvm
    from tvm import te

    a = te.placeholder((16, 16), name="A")
    mod = tvm.IRModule(
        {"main": te.create_prim_func([a, te.compute((16, 16), lambda i, j: a[i, j])])}
    )
    km = KernelModel("k", 1, degree=2)
    for value, ratio in {16: 3.0, 32: None}.items():
        km.at[value] = TaskModel("k", value, 1, mod, 1e6, recorded=4, best_sec=1e-5, tile=1)
        km.at[value].range_ratio = ratio
    kernels, _ = km.dispatch({16: 4, 32: 4})
    ranges = {k.value: k for k in kernels if not k.static and not k.name.endswith("_fine")}
    assert set(ranges) == {16}  # the untimed one at 32 is left out, as the build does
    assert ranges[16].tile == 1 and ranges[16].mean_sec == pytest.approx(3.0 * km.at[16].time(4))


def test_a_fine_variant_is_offered_only_timed_or_to_be_timed_as_the_build_offers_it() -> None:
    """The build offers a fine variant only with its own time. The planner does the same:
    a recorded bucket whose fine variant was not timed and that no new trial tunes again has
    none; one the tune will time (more trials than recorded) or did time has it."""
    import tvm
    from tvm import te

    a = te.placeholder((16, 16), name="A")
    mod = tvm.IRModule(
        {"main": te.create_prim_func([a, te.compute((16, 16), lambda i, j: a[i, j])])}
    )
    km = KernelModel("k", 1, degree=1)
    for value, ratio in {16: 1.2, 32: None}.items():
        tm = TaskModel("k", value, 1, mod, 1e6, recorded=4, best_sec=1e-5, tile=16, fine_tile=4)
        tm.range_ratio, tm.fine_ratio = 1.0, ratio
        km.at[value] = tm

    def fine(trials: dict[int, int]) -> dict[int, float]:
        kernels, _ = km.dispatch(trials)
        return {k.value: k.mean_sec for k in kernels if k.name.endswith("_fine")}

    offered = fine({16: 4, 32: 4})  # no new trial: the untimed one at 32 is left out
    assert set(offered) == {16}
    assert offered[16] == pytest.approx(1.2 * km.at[16].time(4))
    # 8 trials tune 32 again, and the tune times its variants: offered, at the timed median
    assert fine({16: 4, 32: 8})[32] == pytest.approx(1.2 * km.at[32].time(8))


@pytest.mark.slow
@pytest.mark.ray
def test_plan_tune_replan_and_bench_over_the_profile(tmp_path: Path) -> None:
    model = tmp_path / "rows.py"
    model.write_text(ROWS)
    profile = tmp_path / "traffic.csv"
    profile.write_text("var,value,count\nn,3,50\nn,20,900\nn,24,600\nn,30,300\nn,60,20\n")
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    args = ["plan", str(model), "--shape-profile", str(profile), "--db", url]
    result = runner.invoke(app, [*args, "--trials", "10", "--tune", "--seed", "0", "--json"])
    assert result.exit_code == 0, result.output
    job = json.loads(result.output)  # one document: the stages' jobs, each with its plan
    assert len(job["stages"]) == 2 and job["plan"] == job["stages"][-1]["plan"]
    assert job["trials_measured"] == sum(s["trials_measured"] for s in job["stages"]) <= 10
    # each stage stored exactly what its plan split per task; the second was planned with
    # the first's records in the database (counted, not spent again)
    planned: dict[str, int] = {}
    for i, stage in enumerate(job["stages"]):
        split = {t["name"]: t["trials"] for t in stage["plan"]["tasks"]}
        assert {t["name"]: t["trials"] for t in stage["tasks"]} == split
        if i == 0:
            assert all(t["recorded"] == 0 for t in stage["plan"]["tasks"])
        planned.update(split)
    assert sum(planned.values()) <= 10
    # the second stage was planned after timing the first's build at the profile's values
    assert job["stages"][0]["plan"]["calibration"] is None
    cal = job["stages"][1]["plan"]["calibration"]
    assert cal["values"] == [3, 20, 24, 30, 60] and min(cal["measured_sec"]) > 0
    assert cal["generic"] or cal["bucket"]  # the build's kernels were found in the model
    # the re-plan keeps the first stage's buckets: the build dispatches over all of them
    assert set(job["stages"][0]["plan"]["buckets"]) <= set(job["stages"][1]["plan"]["buckets"])
    # a plan's --trials counts the records after the job: fewer than are held is refused
    few = runner.invoke(app, [*args, "--trials", "2"])
    one_line_error(few, "fewer than the records the database holds")
    # re-planning reads the new measurements: measured bests, the records counted
    again = runner.invoke(app, [*args, "--trials", "20", "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    # (not faster: beside other work ten trials may leave every bucket's default its best)
    assert second["before_sec"] <= second["untuned_sec"]
    for t in second["tasks"]:
        if t["name"] in planned:
            assert t["recorded"] == planned[t["name"]] and t["before_sec"] is not None
            assert t["trials"] >= t["recorded"]
    # bench over the profile: traffic-weighted tuned, untuned and numpy
    bench = runner.invoke(
        app, ["bench", str(model), "--shape-profile", str(profile), "--db", url, "--json"]
    )
    assert bench.exit_code == 0, bench.output
    data = json.loads(bench.output)
    assert [r["shape"]["n"] for r in data["results"]] == [3, 20, 24, 30, 60]
    stats = data["traffic"]["stats"]
    assert set(stats) == {"tuned", "untuned", "numpy"}
    weights = list(data["traffic"]["weights"].values())
    mean = sum(w * r["tuned_sec"] for w, r in zip(weights, data["results"], strict=True))
    assert stats["tuned"]["mean_sec"] == pytest.approx(mean)
    one_line_error(
        runner.invoke(
            app,
            ["bench", str(model), "--shape-profile", str(profile), "--shape", "n=3", "--db", url],
        ),
        "not both",
    )
    one_line_error(
        runner.invoke(
            app,
            ["tune", str(model), "--shape-profile", str(profile), "--shape", "n=3", "--db", url],
        ),
        "not both",
    )
    _planner_reads_the_range_kernels_times(model, profile, url, job["plan"]["buckets"])
    # build over the profile (what it changes: tests/tuner/test_dispatch.py), its bests
    # searched schedules now (above), so that tuned kernels run; a profile of a
    # variable the model does not have is one line
    out = tmp_path / "rows.so"
    build_args = ["build", str(model), "--shape-profile", str(profile), "--db", url]
    build = runner.invoke(app, [*build_args, "-o", str(out), "--json"])
    assert build.exit_code == 0, build.output
    assert json.loads(build.output)["tuned_calls"] >= 1 and out.exists(), build.output
    bad = tmp_path / "bad.csv"
    bad.write_text("var,value,count\nm,3,5\n")
    one_line_error(
        runner.invoke(
            app, ["build", str(model), "--shape-profile", str(bad), "--db", url, "-o", str(out)]
        ),
        "m",
    )


def _planner_reads_the_range_kernels_times(
    model: Path, profile: Path, url: str, buckets: list[int]
) -> None:
    """The planner prices a bucket's range kernels by the times the tune measured (the
    build's prices). The default schedule has no range kernel, and beside other work ten
    trials may leave it every bucket's best: so a few more trials at the plan's buckets, the
    fastest searched schedules made the bests (:func:`tests.conftest._searched_bests`), and
    a tune with no trials left times their range kernels."""
    from tests.conftest import _searched_bests
    from tuner.job import TuneConfig, tune
    from tuner.symbolic.profile import load_profile
    from tuner.targets import resolve_target
    from workers.config import MeasureConfig

    loaded, target = load_model(model), resolve_target("llvm")
    config = TuneConfig(trials=16, seed=0, retime=0, measure=MeasureConfig(min_repeat_ms=5))
    tune(loaded.mod, target, Storage(url), config, buckets={"n": buckets})
    if _searched_bests(url, target):
        tune(loaded.mod, target, Storage(url), config, buckets={"n": buckets})
    db = TuneFarmDatabase(Storage(url))
    planner = Planner(loaded.mod, target, db, load_profile(profile))
    timed = [t for k in planner.kernels.values() for t in k.at.values() if t.tile]
    assert timed and all(t.range_ratio and t.range_ratio > 0 for t in timed)
