"""Builders and runners: in-process functions and the Ray pool on a real local Ray."""

from __future__ import annotations

import pytest
import tvm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import TargetKey
from tests.conftest import crashing_mod, matmul_mod
from workers.build import build_artifact
from workers.config import MeasureConfig
from workers.measure import measure_artifact
from workers.results import ErrorKind

FAST = MeasureConfig(number=1, repeat=2, min_repeat_ms=5)


def test_build_and_measure_in_process(llvm_target) -> None:
    mod = matmul_mod()
    result, data = build_artifact(tvm.ir.save_json(mod), TargetKey.of(llvm_target).json)
    assert result.ok and data and data[:4] == b"\x7fELF"
    args = [a.as_json() for a in ArgInfo.from_prim_func(mod["main"])]
    run = measure_artifact(data, args, "cpu", FAST)
    assert run.ok and len(run.run_secs) == 2 and all(s > 0 for s in run.run_secs)
    assert "cores" in run.device


def test_build_errors_are_values(llvm_target) -> None:
    result, data = build_artifact("{not json", TargetKey.of(llvm_target).json)
    assert data is None and result.error_kind is ErrorKind.BUILD_ERROR
    assert ErrorKind.parse(result.error_msg) is ErrorKind.BUILD_ERROR
    run = measure_artifact(b"garbage", [], "cpu", FAST)
    assert run.error_kind is ErrorKind.RUN_ERROR


def test_measure_config_is_validated() -> None:
    with pytest.raises(ValueError, match="repeat"):
        MeasureConfig(repeat=0)
    with pytest.raises(ValueError, match="build_timeout_s"):
        MeasureConfig(build_timeout_s=0)


@pytest.mark.slow
@pytest.mark.ray
def test_ray_builder_and_runner(llvm_target) -> None:
    import ray

    from workers.builder import RayBuilder
    from workers.connection import RayConnection
    from workers.ledger import OVER_BUDGET, OVER_TIME, Ledger, RoundPace, TrialBudget
    from workers.runner import RayRunner

    mod = matmul_mod()
    crash = crashing_mod()
    with RayConnection(num_cpus=2) as conn:
        assert conn.started and ray.is_initialized()
        ledger = Ledger()
        builder = RayBuilder(ledger, FAST)
        runner = RayRunner(ledger, FAST)
        builder.warm_up(2)  # the workers' imports start now; the first batch waits for them
        runner.warm_up()
        built = builder.build([BuilderInput(mod, llvm_target), BuilderInput(crash, llvm_target)])
        assert [b.error_msg for b in built] == [None, None]
        assert not any("did not start" in e for e in builder.events)
        args = ArgInfo.from_prim_func(mod["main"])
        crash_args = ArgInfo.from_prim_func(crash["main"])
        ok = runner.run([RunnerInput(built[0].artifact_path, "cpu", args)])[0].result()
        assert ok.error_msg is None and len(ok.run_secs) == 2
        dead = runner.run([RunnerInput(built[1].artifact_path, "cpu", crash_args)])[0].result()
        # the crashing kernel took its runner process down: an error value, not an exception
        assert ErrorKind.parse(dead.error_msg) is ErrorKind.WORKER_DIED
        entry = ledger.get(built[0].artifact_path)
        assert entry.run.device and entry.build.worker
        # the artifact stays until the recorder pops the entry: a new best is timed again
        twice = runner.remeasure(built[0].artifact_path, [a.as_json() for a in args])
        assert twice is not None and twice.ok and len(twice.run_secs) == 2
        ledger.pop(built[0].artifact_path)  # released from the object store with the entry
        assert runner.remeasure(built[0].artifact_path, []) is None
        # the runner comes back for the next candidate
        again = builder.build([BuilderInput(mod, llvm_target)])
        res = runner.run([RunnerInput(again[0].artifact_path, "cpu", args)])[0].result()
        assert res.error_msg is None
        # a trial budget: candidates past it are dropped, never built
        builder.budget = TrialBudget(1)
        capped = builder.build([BuilderInput(m, llvm_target) for m in (mod, matmul_mod(8, 8, 8))])
        assert capped[0].error_msg is None and capped[1].error_msg == OVER_BUDGET
        assert ledger.get(capped[1].artifact_path).dropped and builder.budget.left == 0
        # a timed job: a round is cut to the candidates measured before the deadline
        now = [0.0]
        builder.budget, builder.pace = TrialBudget(10), RoundPace(35.0, clock=lambda: now[0])
        builder.pace.sending(2)
        now[0] = 20.0
        builder.pace.recorded()  # 10 s a candidate; 15 s left hold one
        mods = [matmul_mod(n, 8, 8) for n in (4, 12, 20)]
        cut = builder.build([BuilderInput(m, llvm_target) for m in mods[:2]])
        assert [b.error_msg for b in cut] == [None, OVER_TIME] and builder.budget.left == 9
        now[0] = 30.0  # 5 s left hold none: the job ends here
        late = builder.build([BuilderInput(mods[2], llvm_target)])
        assert [b.error_msg for b in late] == [OVER_TIME]
        assert builder.budget.closed_by == "time" and builder.stop.is_set()
        runner.shutdown()
    assert not ray.is_initialized()


def _pool_size(_self: object) -> tuple[int, str | None]:
    import os

    return tvm.get_global_func("runtime.NumThreads")(), os.environ.get("OMP_NUM_THREADS")


@pytest.mark.slow
@pytest.mark.ray
def test_cpu_runner_times_kernels_on_the_configured_threads() -> None:
    """Ray starts an actor that reserves no CPU with OMP_NUM_THREADS=1, which TVM's thread
    pool reads: unpinned, a runner timed every candidate on one thread while the model runs
    on all of the target's cores."""
    from dataclasses import replace

    import ray

    from workers.connection import RayConnection
    from workers.slots import DeviceRunner

    with RayConnection(num_cpus=2):
        for threads in (1, 2):
            runner = DeviceRunner.remote("cpu", replace(FAST, threads=threads))
            assert ray.get(runner.__ray_call__.remote(_pool_size)) == (threads, "1")
            ray.kill(runner)
    with pytest.raises(ValueError, match="threads"):
        MeasureConfig(threads=0)


@pytest.mark.slow
@pytest.mark.ray
def test_an_exclusive_runner_returns_once_everything_is_measured(llvm_target) -> None:
    """On the host CPU of a one-node cluster the runner measures alone: run() returns with
    every future resolved, so MetaSchedule's loop cannot start the next search or builds on
    the cores being measured."""
    from workers.builder import RayBuilder
    from workers.connection import RayConnection
    from workers.ledger import Ledger
    from workers.runner import RayRunner

    mods = [matmul_mod(), matmul_mod(8, 8, 8), matmul_mod(32, 8, 16)]
    with RayConnection(num_cpus=2):
        ledger = Ledger()
        built = RayBuilder(ledger, FAST).build([BuilderInput(m, llvm_target) for m in mods])
        runner = RayRunner(ledger, FAST, exclusive=True)
        inputs = [
            RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(m["main"]))
            for b, m in zip(built, mods, strict=True)
        ]
        futures = runner.run(inputs)
        assert all(f.done() for f in futures)
        assert all(f.result().error_msg is None for f in futures)
        assert runner.wait_sec > 0
        runner.shutdown()


@pytest.mark.slow
@pytest.mark.ray
def test_a_candidate_far_slower_than_its_tasks_best_is_timed_by_its_single_runs(
    llvm_target,
) -> None:
    """A screen of 2x the task's best: against a best of 1 ns every candidate is far slower,
    and is timed by its single runs (no repeats sized to ``min_repeat_ms``); against no best,
    a best slower than the candidates, or with the screen off, each is timed in full. Within
    a round, the runner screens by the fastest of the task it has timed: a naive 128^3 matmul
    after an 8^3 one of the same group. (The kernels run 0.1-1 ms: a kernel of a few us is
    within a call's overhead of any screen, workers.measure.SINGLE_RUN_SLACK_SEC.)"""
    from dataclasses import replace

    from workers.builder import RayBuilder
    from workers.connection import RayConnection
    from workers.ledger import Ledger
    from workers.runner import RayRunner

    small = [matmul_mod(64, 64, 64), matmul_mod(96, 64, 64), matmul_mod(64, 96, 64)]
    # repeats of 200 ms: a kernel of at most 1 ms whose first run alone lasts 400 ms (timed by
    # that one long run, not screened) would take a machine 400x slower than it is
    timed = MeasureConfig(number=1, repeat=2, min_repeat_ms=200)
    with RayConnection(num_cpus=2):
        ledger = Ledger()
        builder = RayBuilder(ledger, timed)

        def measured(
            runner: RayRunner,
            best_sec: float | None,
            mods: list[tvm.IRModule] = small,
            group: str | None = None,
        ) -> list[bool]:
            built = builder.build([BuilderInput(m, llvm_target) for m in mods])
            args = [[a.as_json() for a in ArgInfo.from_prim_func(m["main"])] for m in mods]
            keys = [b.artifact_path for b in built]
            inputs = list(zip(keys, args, strict=True))
            futures = runner.run_json(inputs, best_sec=best_sec, group=group)
            assert all(f.result().error_msg is None for f in futures)
            runs = [ledger.pop(k).run for k in keys]
            assert all(len(r.run_secs) == 2 for r in runs)
            return [r.screened for r in runs]

        runner = RayRunner(ledger, timed)
        assert measured(runner, 1e-9) == [True] * 3 and runner.screened == 3
        assert measured(runner, None) == [False] * 3
        assert measured(runner, 10.0) == [False] * 3  # each could be a new best
        pair = [matmul_mod(8, 8, 8), matmul_mod(128, 128, 128)]
        assert measured(runner, None, pair, group="task") == [False, True]
        assert measured(runner, None, pair[1:], group="other") == [False]  # another task's
        assert runner.screened == 4
        runner.shutdown()
        off = RayRunner(ledger, replace(timed, screen=0.0))
        assert measured(off, 1e-9) == [False] * 3 and off.screened == 0
        off.shutdown()
