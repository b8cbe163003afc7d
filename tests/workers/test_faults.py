"""Fault tolerance of builders and device runners, with fault-injecting workers on real Ray.

The helpers in ``tests/workers/faults.py`` hang, crash, die or answer garbage; the pool must
turn each into an error value, recover, retry the candidates of a lost worker (bounded),
quarantine a worker that keeps failing, and answer every candidate exactly once.
"""

from __future__ import annotations

import itertools
import os
import time

import pytest
import tvm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from database import TargetKey
from tests.conftest import matmul_mod
from tests.ray_processes import repo_on_pythonpath
from workers.build_task import sandboxed_build
from workers.config import FaultPolicy, MeasureConfig
from workers.results import ErrorKind
from workers.runner_pool import RunnerPool
from workers.sandbox import Sandbox
from workers.slots import SlotSpec

FAULTS = "tests.workers.faults"
FAST = MeasureConfig(number=1, repeat=2, min_repeat_ms=5, run_timeout_s=20)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray whose workers can import this repository's test helpers."""
    import ray

    from workers.connection import RayConnection

    with repo_on_pythonpath(), RayConnection(num_cpus=2):
        yield ray


def _good(name: str = "good") -> SlotSpec:
    return SlotSpec(name, measure_fn=f"{FAULTS}:fake_measure")


def _bad(name: str, fn: str) -> SlotSpec:
    return SlotSpec(name, measure_fn=f"{FAULTS}:{fn}")


# ----------------------------------------------------------------- builds (no Ray)
@pytest.mark.slow
def test_build_sandbox_turns_hang_crash_garbage_into_values(llvm_target) -> None:
    mod_json = tvm.ir.save_json(matmul_mod(8, 8, 8))
    target_json = TargetKey.of(llvm_target).json
    box = Sandbox(preload=())
    try:
        started = time.perf_counter()
        hung, data = sandboxed_build(mod_json, target_json, 2.0, f"{FAULTS}:hang_build", box)
        assert data is None and hung.error_kind is ErrorKind.BUILD_TIMEOUT
        assert time.perf_counter() - started < 60  # cut at 2 s, not hung (busy machines: slack)
        crashed, data = sandboxed_build(mod_json, target_json, 30, f"{FAULTS}:crash_build", box)
        assert data is None and crashed.error_kind is ErrorKind.BUILD_ERROR
        assert "crashed" in crashed.error_msg and "SIGSEGV" in crashed.error_msg
        assert crashed.crashed and crashed.node_suspect and hung.node_suspect
        junk, data = sandboxed_build(mod_json, target_json, 30, f"{FAULTS}:garbage_build", box)
        assert data is None and junk.error_kind is ErrorKind.BUILD_ERROR
        assert not junk.crashed and not junk.node_suspect  # the candidate's own fault
        # the sandbox recovers: a real build in a fresh child
        ok, data = sandboxed_build(mod_json, target_json, 120, sandbox=box)
        assert ok.ok and data[:4] == b"\x7fELF"
        assert box.started == 3  # first child hung, second crashed, third served the rest
    finally:
        box.kill()
    assert not box.alive()


def test_a_started_sandbox_serves_the_first_build_and_a_build_worker_imports_no_tvm(
    llvm_target,
) -> None:
    import subprocess
    import sys

    box = Sandbox(preload=("workers.build",))
    try:
        assert box.start() is None and box.alive()
        assert box.start() is None  # already running: nothing started
        mod_json = tvm.ir.save_json(matmul_mod(8, 8, 8))
        ok, data = sandboxed_build(mod_json, TargetKey.of(llvm_target).json, 120, sandbox=box)
        assert ok.ok and data[:4] == b"\x7fELF" and box.started == 1
    finally:
        box.kill()
    # what a Ray build worker loads to run a build task: the compiler stays in the sandbox
    code = "import sys, workers.build_task; print('tvm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------- builds on Ray
@pytest.mark.slow
@pytest.mark.ray
def test_ray_builder_recovers_from_hanging_build(local_ray, llvm_target) -> None:
    from tvm import te

    from tuner.pipeline import normalize
    from workers.builder import RayBuilder
    from workers.ledger import Ledger

    a = te.placeholder((8,), name="hang_me")
    hang = normalize(te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2.0)]))
    config = MeasureConfig(build_timeout_s=3)
    builder = RayBuilder(Ledger(), config, build_fn=f"{FAULTS}:flaky_build")
    mods = [matmul_mod(8, 8, 8), hang, matmul_mod(8, 8, 16)]
    results = builder.build([BuilderInput(m, llvm_target) for m in mods])
    kinds = [ErrorKind.parse(r.error_msg) for r in results]
    assert kinds == [None, ErrorKind.BUILD_TIMEOUT, None]
    entry = builder.ledger.get(results[1].artifact_path)
    assert entry.artifact is None and entry.build.error_kind is ErrorKind.BUILD_TIMEOUT
    # the worker that hung is healthy again for the next build
    again = builder.build([BuilderInput(matmul_mod(4, 4, 4), llvm_target)])
    assert again[0].error_msg is None


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("cause", ["deadline", "stop"])
def test_builds_still_compiling_when_the_job_ends_are_cancelled(
    local_ray, llvm_target, cause: str
) -> None:
    """A time budget is a hard cap: a compile still running at the job's deadline (or when the
    job is stopped) is cancelled and dropped, not waited for up to its build timeout; nobody
    is blamed, and the next candidate builds."""
    import threading

    from tvm import te

    from tuner.pipeline import normalize
    from workers.builder import RayBuilder
    from workers.ledger import OVER_TIME_BUILDING, STOPPED, Ledger, RoundPace

    def hang(n: int) -> tvm.IRModule:
        a = te.placeholder((n,), name="hang_me")
        return normalize(te.create_prim_func([a, te.compute((n,), lambda i: a[i] * 2.0)]))

    builder = RayBuilder(Ledger(), MeasureConfig(), build_fn=f"{FAULTS}:flaky_build")
    started = time.perf_counter()
    if cause == "deadline":
        builder.pace = RoundPace(started + 3.0)
    else:
        threading.Timer(3.0, builder.stop.set).start()
    # one compile hung on each of the two CPUs
    results = builder.build([BuilderInput(hang(n), llvm_target) for n in (8, 16)])
    took = time.perf_counter() - started
    why = OVER_TIME_BUILDING if cause == "deadline" else STOPPED
    assert [r.error_msg for r in results] == [why, why]
    assert 2.9 < took < 60  # not the 120 s build timeout (slack for a busy machine)
    for r in results:
        entry = builder.ledger.get(r.artifact_path)
        assert entry.dropped and entry.artifact is None
    assert builder.cancelled == 2 and not builder.strikes and not builder.quarantined
    builder.pace = None
    builder.stop.clear()
    # the cancelled tasks let their CPUs go at once (not when their compile would have timed
    # out), and the next candidates build
    started = time.perf_counter()
    again = builder.build([BuilderInput(matmul_mod(4, 4, n), llvm_target) for n in (4, 8)])
    assert [r.error_msg for r in again] == [None, None]
    assert time.perf_counter() - started < 60


@pytest.mark.ray
def test_a_compile_far_slower_than_the_jobs_builds_is_cut(
    local_ray, llvm_target, monkeypatch
) -> None:
    """Once a job has built enough candidates, one that compiles SLOW_BUILD_FACTOR x their
    median (at least the floor) is cut there as the candidate's own build timeout: not the
    configured 120 s, no node blamed; the range probes after a search get the full timeout."""
    from tvm import te

    import workers.builder as builder_mod
    from tuner.pipeline import normalize
    from workers.builder import RayBuilder
    from workers.ledger import Ledger

    monkeypatch.setattr(builder_mod, "SLOW_BUILD_MIN", 4)
    monkeypatch.setattr(builder_mod, "SLOW_BUILD_FACTOR", 5.0)
    monkeypatch.setattr(builder_mod, "SLOW_BUILD_FLOOR_S", 2.0)
    a = te.placeholder((8,), name="hang_me")
    slow = normalize(te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2.0)]))
    builder = RayBuilder(Ledger(), MeasureConfig(), build_fn=f"{FAULTS}:flaky_build")
    assert builder.compile_limit() == 120.0  # nothing built yet: the configured timeout
    first = builder.build([BuilderInput(matmul_mod(4, 4, n), llvm_target) for n in (2, 4, 6, 8)])
    assert [r.error_msg for r in first] == [None] * 4
    limit = builder.compile_limit()
    assert 2.0 <= limit < 120.0
    started = time.perf_counter()
    results = builder.build([BuilderInput(m, llvm_target) for m in (slow, matmul_mod(4, 4, 10))])
    took = time.perf_counter() - started
    assert ErrorKind.parse(results[0].error_msg) is ErrorKind.BUILD_TIMEOUT
    assert "too slow to compile" in results[0].error_msg and results[1].error_msg is None
    assert limit <= took < limit + 30
    entry = builder.ledger.get(results[0].artifact_path)
    assert entry.build.slow and not entry.build.node_suspect and entry.artifact is None
    assert builder.slow_cut == 1 and not any(builder.strikes.values()) and not builder.quarantined
    builder.cut_slow = False
    assert builder.compile_limit() == 120.0


# ----------------------------------------------------------------- runners
def _run_all(pool: RunnerPool, n: int, sleep: float = 0.0, first: int = 0) -> list:
    ids = range(first, first + n)
    futures = [pool.submit({"sleep": sleep, "id": i}, [], key=f"c{i}") for i in ids]
    return [f.result(timeout=120) for f in futures], futures


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("max_batch", [1, 4])
@pytest.mark.parametrize(
    ("fault", "strikes"), [("die_measure", 2), ("hang_measure", 1), ("garbage_measure", 2)]
)
def test_failing_runner_is_quarantined_and_nothing_is_lost(
    local_ray, fault: str, strikes: int, max_batch: int
) -> None:
    # (a hanging runner costs 2 s a try, meanwhile the good one serves the rest: one strike)
    config = MeasureConfig(run_timeout_s=2.0)
    policy = FaultPolicy(max_attempts=3, quarantine_after=strikes, startup_timeout_s=60)
    slots = [_bad("bad", fault), _good()]
    with RunnerPool(slots, config, policy, max_batch=max_batch) as pool:
        # both actors up before any work (beside two CPU hogs the bad one took seconds to
        # start, and the good one served every candidate before it had had its tries)
        pool.warm_up()
        local_ray.get([slot.warming for slot in pool.slots], timeout=120)
        # waves of 12 until the bad one is quarantined (beside two CPU hogs a dead runner
        # took longer to restart than the good one took to serve 24 candidates)
        results, futures = [], []
        while len(results) < 120:
            done, submitted = _run_all(pool, 12, sleep=0.25, first=len(results))
            results, futures = results + done, futures + submitted
            stats = {row["slot"]: row for row in pool.stats()}
            if stats["bad"]["state"] == "quarantined" and len(results) >= 24:
                break
        # the quarantine is visible cluster-wide (`tunefarm workers`) through a marker actor
        (marker,) = pool._markers
        assert local_ray.get(marker.info.remote()).startswith("bad: ")
    assert all(r.ok for r in results), [r.error_msg for r in results]
    # every candidate answered once, by the good slot; the bad one is quarantined
    assert stats["good"]["measured"] == len(results) and stats["bad"]["measured"] == 0
    assert stats["bad"]["state"] == "quarantined"
    assert all(f.slots[-1] == "good" for f in futures)
    assert any("quarantined: bad" in e for e in pool.events)
    # only the bad slot's tries repeat (a failed batch counts no attempt)
    assert sum(len(f.slots) for f in futures) <= len(results) + strikes
    if max_batch > 1:  # the first call on each slot was a batch; the bad one's was split
        assert any("batch of" in e and "on bad" in e for e in pool.events), pool.events
        assert stats["good"]["calls"] < stats["good"]["measured"]


@pytest.mark.ray
def test_all_runners_failing_fails_every_candidate_as_a_value(local_ray) -> None:
    policy = FaultPolicy(max_attempts=2, quarantine_after=1, startup_timeout_s=60)
    with RunnerPool([_bad("bad", "die_measure")], MeasureConfig(), policy) as pool:
        results, futures = _run_all(pool, 4)
    assert [r.error_kind for r in results] == [ErrorKind.WORKER_DIED] * 4
    # two candidates failed in a row on the only slot: quarantined, the rest fail fast
    assert pool.slots[0].state == "quarantined"
    assert [f.attempts for f in futures] == [2, 2, 0, 0]
    assert "no healthy device runner" in results[3].error_msg


@pytest.mark.slow
@pytest.mark.ray
def test_killed_worker_process_is_restarted_and_its_candidate_retried(local_ray) -> None:
    import signal

    import ray

    with RunnerPool([_good()], MeasureConfig(), FaultPolicy(startup_timeout_s=60)) as pool:
        first = pool.submit({"sleep": 0.0}, [], key="warm")
        assert first.result(timeout=60).ok
        pid = int(ray.get(pool.slots[0].actor.ping.remote()).split(":")[1])
        slow = pool.submit({"sleep": 3.0}, [], key="slow")
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)  # the worker process dies mid-measurement
        res = slow.result(timeout=60)
        assert res.ok and slow.attempts == 2 and slow.slots == ["good", "good"]
        assert pool.slots[0].restarts == 1 and pool.slots[0].state == "idle"
        assert pool.slots[0].failures == 1  # blamed: the candidate succeeded after a restart


@pytest.mark.slow
@pytest.mark.ray
def test_crashing_kernel_is_not_blamed_on_the_runner(local_ray, llvm_target) -> None:
    """A real kernel that kills every runner it touches: worker_died, the slot stays healthy."""
    from tests.conftest import crashing_mod
    from workers.builder import RayBuilder
    from workers.ledger import Ledger
    from workers.runner import RayRunner

    ledger = Ledger()
    policy = FaultPolicy(max_attempts=2, quarantine_after=2, startup_timeout_s=60)
    builder = RayBuilder(ledger, FAST)
    runner = RayRunner(ledger, FAST, slots=[SlotSpec("a"), SlotSpec("b")], policy=policy)
    crash, good = crashing_mod(), matmul_mod()
    built = builder.build([BuilderInput(crash, llvm_target), BuilderInput(good, llvm_target)])
    inputs = [
        RunnerInput(built[0].artifact_path, "cpu", ArgInfo.from_prim_func(crash["main"])),
        RunnerInput(built[1].artifact_path, "cpu", ArgInfo.from_prim_func(good["main"])),
    ]
    try:
        dead, ok = (f.result() for f in runner.run(inputs))
        assert ErrorKind.parse(dead.error_msg) is ErrorKind.WORKER_DIED
        assert "2 attempt(s)" in dead.error_msg
        assert ok.error_msg is None and len(ok.run_secs) == 2
        states = {row["slot"]: row for row in runner.pool.stats()}
        assert all(row["state"] in ("idle", "busy") for row in states.values())
        assert all(row["failures"] == 0 for row in states.values())
    finally:
        runner.shutdown()


def test_fault_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        FaultPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="slot"):
        RunnerPool([], MeasureConfig())


@pytest.mark.slow
@pytest.mark.ray
def test_two_calls_in_flight_still_measure_one_at_a_time(local_ray) -> None:
    """A second call waits in the actor: measurements never overlap, and a queued call of an
    actor that dies goes back to the line without counting as an attempt."""
    spec = _bad("w", "interval_measure")
    with RunnerPool([spec], MeasureConfig(), FaultPolicy(startup_timeout_s=60)) as pool:
        futures = [pool.submit({"sleep": 0.1}, [], key=f"c{i}") for i in range(6)]
        runs = sorted(f.result(timeout=60).run_secs for f in futures)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs)), runs
        assert [f.attempts for f in futures] == [1] * 6

        doomed = pool.submit({"sleep": 0.5, "die": True}, [], key="doomed")
        behind = pool.submit({"sleep": 0.0}, [], key="behind")
        assert ErrorKind.parse(doomed.result(timeout=60).error_msg) is ErrorKind.WORKER_DIED
        assert behind.result(timeout=60).ok
        assert doomed.attempts == 2 and behind.attempts == 1 and behind.slots == ["w"]
        assert any(e.startswith("re-queued: behind") for e in pool.events)  # it was queued
        assert pool.slots[0].measured == 7 and pool.slots[0].state == "idle"
    assert pool.slots[0].restarts == 2


def test_runner_pool_in_flight_is_validated() -> None:
    with pytest.raises(ValueError, match="in_flight"):
        RunnerPool([SlotSpec("x")], MeasureConfig(), in_flight=3)
    with pytest.raises(ValueError, match="max_batch"):
        RunnerPool([SlotSpec("x")], MeasureConfig(), max_batch=0)


@pytest.mark.slow
@pytest.mark.ray
def test_batches_still_measure_one_at_a_time_and_answer_each_once(local_ray) -> None:
    """Batched calls: fewer actor calls than candidates, measurements never overlap, one
    attempt each; a batch whose runner dies goes back to be measured alone, uncounted."""
    spec = _bad("w", "interval_measure")
    policy = FaultPolicy(startup_timeout_s=60)
    with RunnerPool([spec], MeasureConfig(), policy, max_batch=4) as pool:
        futures = [pool.submit({"sleep": 0.05}, [], key=f"c{i}") for i in range(16)]
        runs = sorted(f.result(timeout=60).run_secs for f in futures)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs)), runs
        assert [f.attempts for f in futures] == [1] * 16
        assert pool.slots[0].calls <= 8  # 16 candidates, mostly 4 a call

        doomed = [pool.submit({"sleep": 0.2, "die": i == 1}, [], key=f"d{i}") for i in range(4)]
        doomed += [pool.submit({"sleep": 0.0}, [], key=f"e{i}") for i in range(4)]
        results = [f.result(timeout=60) for f in doomed]
    kinds = [ErrorKind.parse(r.error_msg) if not r.ok else None for r in results]
    assert kinds == [None, ErrorKind.WORKER_DIED] + [None] * 6, kinds
    # d1 killed its batch: every candidate of that batch was measured again alone; only d1
    # used its attempts (2), the others one each
    assert [f.attempts for f in doomed] == [1, 2, 1, 1, 1, 1, 1, 1]
    assert any("batch of" in e and "one by one" in e for e in pool.events), pool.events
