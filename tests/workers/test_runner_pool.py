"""The runner pool's state machine through an in-process transport (no Ray): every candidate
answered exactly once, retries, blame, quarantine, lost nodes and artifacts, batching. The same
behaviours run against real Ray actors in test_faults.py and test_cluster_faults.py; these take
milliseconds, so they cover the combinations."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from workers.config import FaultPolicy, MeasureConfig, Screen
from workers.results import ErrorKind, RunResult
from workers.runner_pool import RunnerPool, SlotState
from workers.slots import SlotSpec
from workers.transport import ArtifactLost, CallFailed, RunnerDied

FAST = MeasureConfig(run_timeout_s=0.3)
# what a slot's actor does with an artifact: a RunResult, or "die" / "hang" / "garbage" / "lost"
Behaviour = Callable[[str, Any], Any]


@dataclass(eq=False)  # refs are compared by identity, as Ray's are
class _Ref:
    answer: Any = None  # a value, or an exception to raise on get
    ready: bool = True


@dataclass(eq=False)
class _Actor:
    slot: str
    alive: bool = True
    refs: list[_Ref] = field(default_factory=list)


class InProcessTransport:
    """Device actors as objects in this process; each slot's behaviour decides every answer.
    Killing an actor makes its pending refs answer ``RunnerDied``."""

    def __init__(self, behaviour: Behaviour, dead_nodes: Sequence[str] = ()) -> None:
        self.behaviour = behaviour
        self.dead_nodes = set(dead_nodes)
        self.started: list[str] = []
        self.killed: list[str] = []
        self.markers: list[tuple[str, str]] = []
        self.screens: dict[Any, Screen | None] = {}  # artifact -> the screen it was sent with
        self.lock = threading.Lock()

    def start(self, spec: SlotSpec, config: MeasureConfig) -> Any:
        with self.lock:
            self.started.append(spec.name)
        return _Actor(spec.name)

    def ping(self, actor: _Actor) -> _Ref:
        return self._ref(actor, _Ref("up"))

    def measure(
        self,
        actor: _Actor,
        batch: Sequence[tuple[Any, list[Any]]],
        screens: Sequence[Screen | None] | None = None,
    ) -> _Ref:
        with self.lock:
            for (artifact, _), screen in zip(batch, screens or [None] * len(batch), strict=True):
                self.screens[artifact] = screen
        answers = [self.behaviour(actor.slot, artifact) for artifact, _ in batch]
        for bad in ("hang", "die", "lost", "garbage"):
            if bad in answers:
                return self._ref(actor, _failure(bad))
        return self._ref(actor, _Ref(answers[0] if len(batch) == 1 else answers))

    def _ref(self, actor: _Actor, ref: _Ref) -> _Ref:
        actor.refs.append(ref)
        return ref

    def wait(self, refs: Sequence[_Ref], timeout: float) -> list[_Ref]:
        ready = [r for r in refs if r.ready]
        if not ready:
            time.sleep(min(timeout, 0.01))
        return ready

    def get_many(self, refs: Sequence[_Ref]) -> dict[Any, Any] | None:
        if any(isinstance(r.answer, Exception) for r in refs):
            return None
        return {r: r.answer for r in refs}

    def get(self, ref: _Ref) -> Any:
        if isinstance(ref.answer, Exception):
            raise ref.answer
        return ref.answer

    def kill(self, actor: Any) -> None:
        if isinstance(actor, _Actor) and actor.alive:
            actor.alive = False
            with self.lock:
                self.killed.append(actor.slot)
            for ref in actor.refs:  # what it had not answered dies with it
                if not ref.ready:
                    ref.answer, ref.ready = RunnerDied("killed"), True

    def node_alive(self, node_id: str) -> bool:
        return node_id not in self.dead_nodes

    def mark_quarantined(self, spec: SlotSpec, reason: str) -> Any:
        self.markers.append((spec.name, reason))
        return f"marker:{spec.name}"


def _failure(kind: str) -> _Ref:
    if kind == "hang":
        return _Ref(None, ready=False)
    if kind == "die":
        return _Ref(RunnerDied("the actor died"))
    if kind == "lost":
        return _Ref(ArtifactLost("object lost"))
    return _Ref(["not", "a", "RunResult"])  # garbage


def ok(secs: float = 1e-3) -> RunResult:
    return RunResult(run_secs=(secs,))


def _pool(
    transport: InProcessTransport, names: Sequence[str], **kw: Any
) -> tuple[RunnerPool, list[SlotSpec]]:
    specs = [SlotSpec(n, node_id=f"node-{n}") for n in names]
    policy = kw.pop("policy", FaultPolicy(max_attempts=2, quarantine_after=2))
    return RunnerPool(specs, FAST, policy, transport=transport, **kw), specs


@pytest.mark.parametrize(("in_flight", "max_batch"), [(1, 1), (2, 1), (2, 4)])
def test_every_candidate_is_answered_once_with_its_own_result(in_flight, max_batch) -> None:
    transport = InProcessTransport(lambda _slot, artifact: ok(float(artifact)))
    pool, _ = _pool(transport, ["a", "b"], in_flight=in_flight, max_batch=max_batch)
    with pool:
        futures = [pool.submit(str(i + 1), []) for i in range(40)]
        results = [f.result(timeout=10) for f in futures]
    assert [r.run_secs for r in results] == [(float(i + 1),) for i in range(40)]
    assert sum(row["measured"] for row in pool.stats()) == 40
    assert all(f.attempts == 1 for f in futures)
    if max_batch > 1:
        assert sum(row["calls"] for row in pool.stats()) < 40  # batched


@pytest.mark.parametrize("max_batch", [1, 8])
def test_each_candidate_reaches_its_runner_with_its_own_screen(max_batch: int) -> None:
    transport = InProcessTransport(lambda _slot, _artifact: ok())
    pool, _ = _pool(transport, ["a"], in_flight=2, max_batch=max_batch)
    screens = [None if i % 3 == 0 else Screen(i * 1e-6, f"task{i % 2}") for i in range(12)]
    with pool:
        futures = [pool.submit(str(i), [], screen=s) for i, s in enumerate(screens)]
        assert all(f.result(timeout=10).ok for f in futures)
    assert transport.screens == {str(i): s for i, s in enumerate(screens)}


def test_a_slot_that_keeps_dying_is_blamed_and_quarantined_the_work_done_elsewhere() -> None:
    transport = InProcessTransport(lambda slot, _a: "die" if slot == "bad" else ok())
    pool, _ = _pool(transport, ["bad", "good"], in_flight=1)
    with pool:
        results = [pool.submit(str(i), []).result(timeout=10) for i in range(8)]
    assert all(r.ok for r in results)  # each retried on the good slot
    states = {row["slot"]: row["state"] for row in pool.stats()}
    assert states["bad"] == SlotState.QUARANTINED and states["good"] != SlotState.QUARANTINED
    assert [name for name, _ in transport.markers] == ["bad"]
    assert "bad" in transport.killed


def test_a_kernel_that_kills_every_runner_fails_alone_and_blames_nobody() -> None:
    transport = InProcessTransport(lambda _slot, a: "die" if a == "crash" else ok())
    pool, _ = _pool(transport, ["a", "b"], in_flight=1)
    with pool:
        crash = pool.submit("crash", []).result(timeout=10)
        fine = [pool.submit(str(i), []).result(timeout=10) for i in range(4)]
    assert crash.error_kind == ErrorKind.WORKER_DIED and "2 attempt(s)" in (crash.error_msg or "")
    assert all(r.ok for r in fine)
    assert all(row["state"] != SlotState.QUARANTINED for row in pool.stats())


def test_a_hang_times_out_and_its_actor_is_restarted() -> None:
    transport = InProcessTransport(lambda _slot, a: "hang" if a == "slow" else ok())
    pool, _ = _pool(transport, ["a"], in_flight=1)
    with pool:
        slow = pool.submit("slow", []).result(timeout=10)
        after = pool.submit("1", []).result(timeout=10)
    assert slow.error_kind == ErrorKind.RUN_TIMEOUT
    assert after.ok
    (row,) = pool.stats()
    assert row["restarts"] == 2 and transport.started.count("a") == 3


def test_garbage_counts_against_the_slot_at_once() -> None:
    transport = InProcessTransport(lambda slot, _a: "garbage" if slot == "bad" else ok())
    pool, _ = _pool(transport, ["bad", "good"], in_flight=1)
    with pool:
        results = [pool.submit(str(i), []).result(timeout=10) for i in range(4)]
    assert all(r.ok for r in results)
    assert {row["slot"]: row["state"] for row in pool.stats()}["bad"] == SlotState.QUARANTINED


def test_a_slot_whose_node_left_is_lost_and_its_candidate_retried() -> None:
    transport = InProcessTransport(
        lambda slot, _a: "die" if slot == "gone" else ok(), dead_nodes=["node-gone"]
    )
    pool, _ = _pool(transport, ["gone", "here"], in_flight=1)
    with pool:
        results = [pool.submit(str(i), []).result(timeout=10) for i in range(3)]
    assert all(r.ok for r in results)
    assert {row["slot"]: row["state"] for row in pool.stats()}["gone"] == SlotState.LOST
    assert not transport.markers  # lost, not quarantined


def test_a_lost_artifact_is_rebuilt_and_measured() -> None:
    seen: list[str] = []

    def behaviour(_slot: str, artifact: Any) -> Any:
        seen.append(artifact)
        return "lost" if artifact == "first-copy" else ok()

    pool, _ = _pool(InProcessTransport(behaviour), ["a"], in_flight=1)
    with pool:
        result = pool.submit("first-copy", [], rebuild=lambda: "second-copy").result(timeout=10)
    assert result.ok and seen == ["first-copy", "second-copy"]


def test_a_failed_batch_is_measured_one_by_one_and_nobody_is_blamed() -> None:
    transport = InProcessTransport(lambda _slot, a: "die" if a == "crash" else ok())
    pool, _ = _pool(transport, ["a"], in_flight=1, max_batch=4)
    with pool:
        futures = [pool.submit(a, []) for a in ("1", "2", "crash", "3", "4", "5")]
        results = {f.key: f.result(timeout=10) for f in futures}
    bad = [f for f in futures if not results[f.key].ok]
    assert len(bad) == 1 and results[bad[0].key].error_kind == ErrorKind.WORKER_DIED
    assert sum(r.ok for r in results.values()) == 5


def test_a_call_that_fails_otherwise_is_a_worker_error_value() -> None:
    calls = {"n": 0}

    def behaviour(_slot: str, _a: Any) -> Any:
        calls["n"] += 1
        return ok()

    transport = InProcessTransport(behaviour)
    original = transport.measure

    def failing_first(
        actor: Any, batch: Sequence[tuple[Any, list[Any]]], screens: Any = None
    ) -> _Ref:
        if calls["n"] == 0:
            calls["n"] += 1
            return transport._ref(actor, _Ref(CallFailed("transport broke")))
        return original(actor, batch, screens)

    transport.measure = failing_first  # type: ignore[method-assign]
    pool, _ = _pool(transport, ["a", "b"], in_flight=1)
    with pool:
        result = pool.submit("1", []).result(timeout=10)
    assert result.ok  # retried on the other slot
    assert any("transport broke" in e for e in pool.events)


def test_shutdown_answers_what_is_still_queued() -> None:
    transport = InProcessTransport(lambda _slot, _a: "hang")
    pool, _ = _pool(transport, ["a"], in_flight=1)
    futures = [pool.submit(str(i), []) for i in range(3)]
    pool.shutdown()
    results = [f.result(timeout=5) for f in futures]
    assert all(r.error_kind == ErrorKind.WORKER_DIED for r in results)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit("late", [])


def test_warm_up_starts_each_actor_once_ahead_of_its_first_candidate() -> None:
    transport = InProcessTransport(lambda _slot, artifact: ok(float(artifact)))
    pool, _ = _pool(transport, ["a", "b"])
    with pool:
        pool.warm_up()
        assert sorted(transport.started) == ["a", "b"]  # before any candidate
        pool.warm_up()  # a second call starts nothing more
        results = [pool.submit(str(i + 1), []).result(timeout=10) for i in range(6)]
    assert [r.run_secs for r in results] == [(float(i + 1),) for i in range(6)]
    assert sorted(transport.started) == ["a", "b"]  # the warm actors measured them


class _DiesWarmingUp(InProcessTransport):
    """The first actor of each slot dies before it answers its ping."""

    def ping(self, actor: _Actor) -> _Ref:
        if self.started.count(actor.slot) == 1:
            return self._ref(actor, _Ref(RunnerDied("died importing TVM")))
        return super().ping(actor)


def test_a_runner_that_died_warming_up_is_started_again_for_its_first_candidate() -> None:
    transport = _DiesWarmingUp(lambda _slot, _a: ok())
    pool, _ = _pool(transport, ["a"], in_flight=1)
    with pool:
        pool.warm_up()
        result = pool.submit("1", []).result(timeout=10)
    assert result.ok
    assert transport.started == ["a", "a"] and pool.stats()[0]["restarts"] == 1
