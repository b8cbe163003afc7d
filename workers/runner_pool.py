"""Device runners across a cluster: one actor per device, candidates dispatched with retries.

Each *slot* is one device (a host CPU, one GPU, an ARM node, a board behind TVM RPC) owned by one
Ray actor that measures one candidate at a time. A :class:`RunnerPool` hands queued candidates to
idle slots and turns every failure into a value:

- the measurement returns an error value (the kernel failed): final, the slot is fine;
- the actor dies (a kernel that crashes it, a killed process), hangs past ``run_timeout_s``
  or returns something that is not a :class:`RunResult`: the actor is killed and restarted
  and the candidate goes back to the queue, for another slot when there is one, at most
  ``max_attempts`` times in all (then ``worker_died`` / ``run_timeout`` / ``invalid_result``);
- blame: garbage or a failed start count against the slot at once; a death or a hang only if
  the candidate then succeeds elsewhere (else the kernel was at fault). Until that verdict the
  suspected slot takes no fresh candidate while an unsuspected healthy slot exists, so a
  broken slot burns exactly ``quarantine_after`` candidates' first tries, however fast it
  restarts;
- a slot with ``quarantine_after`` failures in a row is quarantined: it gets no more work;
  so is one on which ``2 * quarantine_after`` candidates in a row failed (everywhere);
- a slot whose node left the cluster is dropped; its candidate is re-queued.

A candidate is answered exactly once: its future is resolved by the dispatcher thread only, and
a re-queued candidate is dispatched again only after its previous attempt is known to be dead.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from database.errors import error_summary
from workers.config import FaultPolicy, MeasureConfig, Screen
from workers.results import ErrorKind, EventLog, RunResult
from workers.slots import SlotSpec
from workers.transport import (
    ArtifactLost,
    CallError,
    RayTransport,
    RunnerDied,
    Transport,
)

log = logging.getLogger("tunefarm.workers")


class SlotState(enum.StrEnum):
    """Where a slot stands: ``idle`` and ``busy`` take work; ``quarantined`` (blamed too
    often), ``lost`` (its node left) and ``stopped`` (the pool shut down) never again."""

    IDLE = "idle"
    BUSY = "busy"
    QUARANTINED = "quarantined"
    LOST = "lost"
    STOPPED = "stopped"


class PoolFuture:
    """The pending result of one candidate; resolved once, by the dispatcher."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._event = threading.Event()
        self._result: RunResult | None = None
        self.attempts = 0
        self.slots: list[str] = []  # slots that tried it, in order

    def done(self) -> bool:
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> RunResult:
        if not self._event.wait(timeout):
            raise TimeoutError(f"candidate {self.key} still pending")
        assert self._result is not None
        return self._result

    def _resolve(self, result: RunResult) -> None:
        if self._event.is_set():  # never twice
            raise RuntimeError(f"candidate {self.key} resolved twice")
        self._result = result
        self._event.set()


@dataclass
class _Work:
    future: PoolFuture
    artifact: Any
    args_info: list[Any]
    rebuild: Callable[[], Any] | None = None
    screen: Screen | None = None  # what it is screened by
    avoid: set[str] = field(default_factory=set)  # slots it failed on
    suspects: list[str] = field(default_factory=list)  # slots to blame if it succeeds later
    last: tuple[ErrorKind, str] | None = None  # its latest failure
    alone: bool = False  # its batch failed: measured in a call of its own from now on


@dataclass
class Slot:
    """Live state of one device slot."""

    spec: SlotSpec
    actor: Any = None
    starting: bool = False  # waiting for a fresh actor's first ping
    warming: Any = None  # a started actor's first ping, until its first call awaits it
    warm_deadline: float = 0.0
    work: list[_Work] = field(default_factory=list)  # the current call's candidates
    ref: Any = None
    deadline: float = 0.0
    ahead: list[_Work] = field(default_factory=list)  # a second call queued behind ``work``
    ahead_ref: Any = None
    failures: int = 0  # consecutive failures blamed on this slot
    streak: int = 0  # consecutive candidates that failed here and everywhere else
    measured: int = 0
    calls: int = 0  # measure calls sent (fewer than ``measured`` when batching)
    restarts: int = 0
    state: SlotState = SlotState.IDLE

    @property
    def healthy(self) -> bool:
        return self.state in (SlotState.IDLE, SlotState.BUSY)


def _err(kind: ErrorKind, detail: str, worker: str | None = None) -> RunResult:
    return RunResult(error_kind=kind, error_msg=kind.message(detail), worker=worker)


class RunnerPool:
    """Dispatches candidates to device slots, one at a time per slot, with fault recovery.

    ``in_flight=2`` (the default) keeps a second call queued in each busy actor when
    candidates wait: the actor (``max_concurrency=1``) still measures one at a time, but starts
    the next one without waiting for the dispatcher's round trip. The queued call counts as an
    attempt only once it is the slot's current call; if the actor is killed before, it goes
    back to the queue unharmed.

    ``max_batch > 1`` sends up to that many fresh candidates in one actor call, an even share
    of the queue over the healthy slots' calls in flight (``DeviceRunner.measure_batch``, still
    one at a time on the device): fewer calls where measurements are short and runners many.
    A batch that fails (death, hang, garbage) cannot say which candidate did it, so its
    candidates go back to the front of the line to be measured alone, with no attempt counted
    and nobody blamed (a garbage answer still counts against the slot).
    """

    def __init__(
        self,
        slots: list[SlotSpec],
        config: MeasureConfig,
        policy: FaultPolicy | None = None,
        in_flight: int = 2,
        max_batch: int = 1,
        transport: Transport | None = None,
    ) -> None:
        if not slots:
            raise ValueError("a runner pool needs at least one device slot")
        if in_flight not in (1, 2):
            raise ValueError("RunnerPool.in_flight must be 1 or 2")
        if max_batch < 1:
            raise ValueError("RunnerPool.max_batch must be >= 1")
        self.in_flight = in_flight
        self.transport: Transport = transport or RayTransport()
        self.max_batch = max_batch
        self.config = config
        self.policy = policy or FaultPolicy()
        self.slots = [Slot(spec) for spec in slots]
        self._queue: collections.deque[_Work] = collections.deque()
        self._on_trial: list[_Work] = []  # died or hung on a slot: blamed if they succeed elsewhere
        self._cv = threading.Condition()
        self._stop = False
        self._ids = itertools.count()
        self._log = EventLog(log, logging.WARNING)
        self.events = self._log.events  # what happened, for logs and tests
        self._markers: list[Any] = []  # QuarantinedSlot actors, until shutdown
        self._thread = threading.Thread(target=self._loop, name="tunefarm-runners", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- public
    def submit(
        self,
        artifact: Any,
        args_info: list[Any],
        key: str | None = None,
        rebuild: Callable[[], Any] | None = None,
        screen: Screen | None = None,
    ) -> PoolFuture:
        """Queue one candidate (``artifact``: an ObjectRef or bytes of the built ``.so``;
        ``screen``: what it is screened by, :class:`~workers.config.Screen`)."""
        fut = PoolFuture(key or f"candidate-{next(self._ids)}")
        with self._cv:
            if self._stop:
                raise RuntimeError("the runner pool is shut down")
            self._queue.append(_Work(fut, artifact, args_info, rebuild, screen))
            self._cv.notify()
        return fut

    def warm_up(self) -> None:
        """Start every slot's actor now (its imports), ahead of the first candidate, without
        waiting: the first call then waits only for what is left of its start."""
        with self._cv:
            for slot in self.slots:
                if slot.actor is None and slot.healthy and not self._stop:
                    self._start_actor(slot)

    def _start_actor(self, slot: Slot) -> None:
        """Start the slot's actor and send its first ping (awaited at its first call)."""
        slot.actor = self.transport.start(slot.spec, self.config)
        slot.warming = self.transport.ping(slot.actor)
        slot.warm_deadline = time.monotonic() + self.policy.startup_timeout_s

    def stats(self) -> list[dict[str, Any]]:
        """One row per slot: name, state, measured, consecutive failures, restarts."""
        with self._cv:
            return [
                {
                    "slot": s.spec.name,
                    "node": s.spec.node_id,
                    "state": s.state,
                    "measured": s.measured,
                    "calls": s.calls,
                    "failures": s.failures,
                    "restarts": s.restarts,
                }
                for s in self.slots
            ]

    def shutdown(self) -> None:
        """Fail what is still queued, stop the dispatcher and the actors."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
        for slot in self.slots:
            self._kill(slot)
        for marker in self._markers:
            self.transport.kill(marker)
        self._markers.clear()

    def __enter__(self) -> RunnerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ----------------------------------------------------------------- dispatcher
    def _loop(self) -> None:
        try:
            self._dispatch_loop()
        except BaseException as err:  # never leave a future unresolved
            log.exception("runner pool dispatcher failed")
            with self._cv:
                self._stop = True
                self._fail_all(f"runner pool dispatcher failed: {error_summary(err)}")

    def _dispatch_loop(self) -> None:
        while True:
            with self._cv:
                if self._stop:
                    self._fail_all("runner pool shut down")
                    return
                self._assign()
                busy = [s for s in self.slots if s.ref is not None]
                if not busy:
                    if self._queue and not any(s.healthy for s in self.slots):
                        self._fail_all("no healthy device runner left (all quarantined or lost)")
                    self._cv.wait(0.2)
                    continue
            refs = [s.ref for s in busy]
            wait_s = max(0.0, min(0.2, min(s.deadline for s in busy) - time.monotonic()))
            ready = self.transport.wait(refs, wait_s)
            # one round trip for every ready result; if some failed, fetch one by one
            values = (self.transport.get_many(ready) or {}) if ready else {}
            ready_set = set(ready)
            now = time.monotonic()
            for slot in busy:
                if slot.ref in ready_set:
                    self._collect(slot, values.get(slot.ref, _UNFETCHED))
                elif now > slot.deadline:
                    self._timeout(slot)

    def _suspected(self) -> set[str]:
        """Slots awaiting a verdict: a candidate died or hung there and is not yet answered."""
        self._on_trial = [w for w in self._on_trial if not w.future.done()]
        return {name for w in self._on_trial for name in w.suspects}

    def _assign(self) -> None:
        idle = [s for s in self.slots if s.state == SlotState.IDLE]
        suspected = self._suspected()
        # suspected slots serve only when every healthy slot is suspected (a lone runner must
        # still make progress)
        if any(s.healthy and s.spec.name not in suspected for s in self.slots):
            idle = [s for s in idle if s.spec.name not in suspected]
        waiting: list[_Work] = []
        while self._queue and idle:
            work = self._queue.popleft()
            if not work.avoid:  # the common case: any idle slot
                slot = idle.pop(0)
                self._dispatch(slot, self._take(slot, work))
                continue
            # a candidate that failed on a slot is retried on another one if there is one,
            # else on the same one, restarted
            fresh = [s for s in self.slots if s.healthy and s.spec.name not in work.avoid]
            pool = fresh or [s for s in self.slots if s.healthy]
            pick = next((s for s in idle if s in pool), None)
            if pick is not None:
                idle.remove(pick)
                self._dispatch(pick, [work])
            elif pool:
                waiting.append(work)  # wait for one of them to be idle
            else:
                self._give_up(work)
        self._queue.extendleft(reversed(waiting))  # they keep their place in line
        if self.in_flight > 1 and self._queue:
            self._queue_ahead(suspected)

    def _take(self, slot: Slot, work: _Work) -> list[_Work]:
        """``work`` plus, when batching pays, the fresh candidates right behind it."""
        batch = [work]
        if self.max_batch == 1 or work.alone or slot.spec.actor_cls is not None:
            return batch
        # an even share of what waits across the healthy slots' calls in flight, so the last
        # calls end together (no slot left with a long batch while the others idle)
        calls = self.in_flight * sum(1 for s in self.slots if s.healthy)
        size = min(self.max_batch, -(-(len(self._queue) + 1) // max(1, calls)))
        while len(batch) < size and self._queue:
            nxt = self._queue[0]
            if nxt.avoid or nxt.alone:
                break
            batch.append(self._queue.popleft())
        return batch

    def _queue_ahead(self, suspected: set[str]) -> None:
        """Queue a second call in busy actors (fresh candidates only: a retried one waits for
        an idle slot of its choice)."""
        for slot in self.slots:
            if not self._queue or self._queue[0].avoid:
                return
            if (
                slot.state == SlotState.BUSY
                and slot.spec.name not in suspected
                and slot.ref is not None
                and not slot.starting
                and not slot.ahead
                and slot.actor is not None
            ):
                slot.ahead = self._take(slot, self._queue.popleft())
                slot.ahead_ref = self._call(slot, slot.ahead)

    def _call(self, slot: Slot, batch: list[_Work]) -> Any:
        slot.calls += 1
        pairs = [(w.artifact, w.args_info) for w in batch]
        return self.transport.measure(slot.actor, pairs, [w.screen for w in batch])

    def _start_attempt(self, slot: Slot, batch: list[_Work]) -> None:
        for work in batch:
            work.future.attempts += 1
            work.future.slots.append(slot.spec.name)
        slot.deadline = time.monotonic() + self.config.run_timeout_s * len(batch)

    def _promote(self, slot: Slot) -> None:
        """The queued call becomes the slot's current one (the actor is running it)."""
        if not slot.ahead or not slot.healthy:
            return
        batch, ref = slot.ahead, slot.ahead_ref
        slot.ahead, slot.ahead_ref = [], None
        slot.work, slot.ref, slot.state = batch, ref, SlotState.BUSY
        self._start_attempt(slot, batch)

    def _unqueue_ahead(self, slot: Slot) -> None:
        """The actor is gone: its queued call never ran; back to the front of the line."""
        if not slot.ahead:
            return
        batch = slot.ahead
        slot.ahead, slot.ahead_ref = [], None
        for work in batch:
            self._log.note(
                f"re-queued: {work.future.key} (it waited behind a call on {slot.spec.name})"
            )
        self._push_front(batch)

    def _push_front(self, works: list[_Work]) -> None:
        """Back to the front of the line, in their order (before any fresh candidate)."""
        with self._cv:
            self._queue.extendleft(reversed(works))

    def _dispatch(self, slot: Slot, batch: list[_Work]) -> None:
        slot.work, slot.state = batch, SlotState.BUSY
        if slot.actor is None:
            self._start_actor(slot)
        if slot.warming is not None:  # a fresh actor (or warm_up's): its ping before any timing
            slot.starting = True
            slot.ref, slot.warming = slot.warming, None
            slot.deadline = slot.warm_deadline
            return
        self._measure(slot)

    def _measure(self, slot: Slot) -> None:
        assert slot.work
        self._start_attempt(slot, slot.work)
        slot.ref = self._call(slot, slot.work)

    def _release(self, slot: Slot) -> list[_Work]:
        batch = slot.work
        assert batch
        slot.work, slot.ref, slot.starting = [], None, False
        if slot.state == SlotState.BUSY:
            slot.state = SlotState.IDLE
        return batch

    def _split(self, batch: list[_Work], slot: Slot, kind: ErrorKind, detail: str) -> None:
        """A failed batch: nobody knows which candidate did it; each is measured alone."""
        self._log.note(
            f"{kind.value}: batch of {len(batch)} on {slot.spec.name}: {detail}; "
            "measuring them one by one"
        )
        for work in batch:
            work.future.attempts -= 1
            work.future.slots.pop()
            work.alone = True
        self._push_front(batch)

    def _collect(self, slot: Slot, value: Any = None) -> None:
        try:
            if value is _UNFETCHED:
                value = self.transport.get(slot.ref)
        except ArtifactLost as err:
            batch = self._release(slot)  # the artifact is gone, not the runner
            self._promote(slot)
            if len(batch) > 1:
                self._split(batch, slot, ErrorKind.WORKER_DIED, error_summary(err))
            else:
                self._artifact_lost(batch[0], err)
            return
        except RunnerDied as err:
            detail = f"runner {slot.spec.name} died: {error_summary(err)}"
            if slot.spec.node_id and not self.transport.node_alive(slot.spec.node_id):
                batch = self._release(slot)
                self._kill(slot)
                slot.state = SlotState.LOST
                self._log.note(f"lost: {slot.spec.name} (its node left the cluster)")
                if len(batch) > 1:
                    self._split(batch, slot, ErrorKind.WORKER_DIED, detail)
                else:
                    self._retry(batch[0], slot, ErrorKind.WORKER_DIED, detail, blame=None)
                return
            self._failed(slot, ErrorKind.WORKER_DIED, detail, certain=slot.starting)
            return
        except CallError as err:
            detail = f"runner {slot.spec.name}: {error_summary(err)}"
            self._failed(slot, ErrorKind.WORKER_DIED, detail, certain=True)
            return
        if slot.starting:
            slot.starting = False
            self._measure(slot)
            return
        values = [value] if len(slot.work) == 1 else value
        if not (
            isinstance(values, list)
            and len(values) == len(slot.work)
            and all(isinstance(v, RunResult) for v in values)
        ):
            detail = f"runner {slot.spec.name} returned {type(value).__name__}, not a RunResult"
            self._failed(slot, ErrorKind.INVALID_RESULT, detail, certain=True)
            return
        batch = self._release(slot)
        self._promote(slot)
        slot.failures = slot.streak = 0
        slot.measured += len(batch)
        for work, result in zip(batch, values, strict=True):
            for name in work.suspects:  # it failed there but works here: that slot was at fault
                self._strike(self._slot(name))
            work.future._resolve(result)

    def _timeout(self, slot: Slot) -> None:
        if slot.starting:
            self._failed(
                slot, ErrorKind.WORKER_DIED, f"runner {slot.spec.name} did not start", certain=True
            )
            return
        detail = f"no result within {self.config.run_timeout_s:.0f} s on {slot.spec.name}"
        self._failed(slot, ErrorKind.RUN_TIMEOUT, detail, certain=False)

    def _failed(self, slot: Slot, kind: ErrorKind, detail: str, *, certain: bool) -> None:
        """Restart the slot's actor and retry the candidate on another slot.

        ``certain``: the slot is at fault (garbage, failed start). Otherwise (it died or hung
        while running the candidate) the kernel may be at fault: the slot is blamed only if the
        candidate then succeeds on another slot.
        """
        batch = self._release(slot)
        self._kill(slot)
        slot.restarts += 1
        if certain:
            self._strike(slot)
        if len(batch) > 1:
            self._split(batch, slot, kind, detail)
            return
        self._retry(batch[0], slot, kind, detail, blame=None if certain else slot.spec.name)

    def _strike(self, slot: Slot) -> None:
        slot.failures += 1
        if slot.failures >= self.policy.quarantine_after and slot.healthy:
            self._quarantine(slot, f"{slot.failures} failures in a row")

    def _quarantine(self, slot: Slot, why: str) -> None:
        slot.state = SlotState.QUARANTINED
        self._kill(slot)
        self._log.note(f"quarantined: {slot.spec.name} after {why}")
        with contextlib.suppress(Exception):
            self._markers.append(self.transport.mark_quarantined(slot.spec, why))

    def _retry(
        self, work: _Work, slot: Slot, kind: ErrorKind, detail: str, blame: str | None
    ) -> None:
        self._log.note(f"{kind.value}: {work.future.key} on {slot.spec.name}: {detail}")
        work.avoid.add(slot.spec.name)
        work.last = (kind, detail)
        if blame:
            work.suspects.append(blame)
            self._on_trial.append(work)
        if work.future.attempts >= self.policy.max_attempts:
            self._give_up(work)
            return
        self._push_front([work])

    def _give_up(self, work: _Work) -> None:
        """Final answer for a candidate no slot could measure (suspects are forgiven)."""
        kind, detail = work.last or (ErrorKind.WORKER_DIED, "no healthy device runner left")
        tried = f"{work.future.attempts} attempt(s) on {', '.join(work.future.slots) or '-'}"
        work.future._resolve(_err(kind, f"{detail} ({tried})"))
        # a slot that fails candidate after candidate, with no success between, is broken
        # even if no other slot could prove it
        for name in dict.fromkeys(work.future.slots):
            slot = self._slot(name)
            slot.streak += 1
            if slot.streak >= 2 * self.policy.quarantine_after and slot.healthy:
                self._quarantine(slot, f"{slot.streak} failed candidates in a row")

    def _slot(self, name: str) -> Slot:
        return next(s for s in self.slots if s.spec.name == name)

    def _artifact_lost(self, work: _Work, err: Exception) -> None:
        self._log.note(f"artifact lost: {work.future.key}: {error_summary(err)}")
        if work.rebuild is None or work.future.attempts >= self.policy.max_attempts:
            work.future._resolve(
                _err(ErrorKind.WORKER_DIED, f"artifact lost with its node: {error_summary(err)}")
            )
            return
        work.artifact = work.rebuild()
        self._push_front([work])

    def _kill(self, slot: Slot) -> None:
        self._unqueue_ahead(slot)
        if slot.actor is not None:
            self.transport.kill(slot.actor)
        slot.actor = slot.warming = None

    def _fail_all(self, detail: str) -> None:
        while self._queue:
            work = self._queue.popleft()
            work.future._resolve(_err(ErrorKind.WORKER_DIED, detail))
        for slot in self.slots:
            for work in slot.ahead:
                work.future._resolve(_err(ErrorKind.WORKER_DIED, detail))
            slot.ahead, slot.ahead_ref = [], None
            for work in self._release(slot) if slot.work else []:
                if not work.future.done():
                    work.future._resolve(_err(ErrorKind.WORKER_DIED, detail))
            if slot.state == SlotState.IDLE:
                slot.state = SlotState.STOPPED


_UNFETCHED = object()
