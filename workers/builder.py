"""A MetaSchedule builder whose builds are Ray tasks (one CPU each) that return the compiled
artifact into Ray's object store: nothing travels through a shared filesystem."""

from __future__ import annotations

import functools
import logging
import math
import statistics
import threading
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import ray
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder

from workers.build_task import DEFAULT_BUILD_FN, build_task, warm_task
from workers.config import FaultPolicy, MeasureConfig
from workers.connection import RayConnection
from workers.ledger import (
    OVER_BUDGET,
    OVER_TIME,
    OVER_TIME_BUILDING,
    STOPPED,
    Entry,
    Interrupted,
    Ledger,
    RoundPace,
    TrialBudget,
    run_result_of_row,
)
from workers.results import BuildResult, ErrorKind, EventLog
from workers.slots import SlotSpec

if TYPE_CHECKING:
    from database import TuneFarmDatabase

log = logging.getLogger("tunefarm.workers")


NODE_LABEL = "ray.io/node-id"  # Ray's built-in label of every node

# A candidate whose compile runs SLOW_BUILD_FACTOR times this job's median build (of its last
# SLOW_BUILD_SAMPLE clean builds, once it has SLOW_BUILD_MIN of them), and at least
# SLOW_BUILD_FLOOR_S, is cut there as a build timeout (its own fault: no retry elsewhere, no
# blame): a 20 s compile among 0.3 s ones holds a round's other candidates and a core for 60
# candidates' worth of builds. MeasureConfig.build_timeout_s stays the cap.
SLOW_BUILD_FACTOR = 20.0
SLOW_BUILD_FLOOR_S = 10.0
SLOW_BUILD_MIN = 16
SLOW_BUILD_SAMPLE = 64
# a build cut at a job's end or deadline that has not stopped this long after its cancel
# (the sandbox's waits see a cancel within POLL_SLICE_S) is killed with its worker
CUT_GRACE_S = 2.0


def _kill_late(refs: list[Any], timeout_s: float) -> list[Any]:
    """Force-cancel (kill with their workers) the tasks of ``refs`` not ended within
    ``timeout_s``; those tasks' refs."""
    _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    for ref in late:
        ray.cancel(ref, force=True)
    return late


def _build_nodes() -> set[str]:
    """Alive nodes that offer CPUs (where build tasks can run)."""
    return {
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
    }


@derived_object
class RayBuilder(PyBuilder):
    """Builds candidates as Ray tasks; skips candidates already measured on the target.

    Each build runs in its worker's killable child process (:mod:`workers.sandbox`): a
    compiler that hangs or crashes becomes a ``build_timeout``/``build_error`` value. A build
    task lost with its worker or node is retried by Ray (``policy.max_attempts`` in all), and
    an artifact lost with its node before it was measured is rebuilt the same way.

    A build whose compiler crashed or hung is built once more on another node (when there is
    one). If it builds there, the first node is blamed; a node blamed ``policy.quarantine_after``
    times with no clean round in between is **quarantined**: no build is sent to it any more
    (Ray's ``ray.io/node-id`` label selector), and a ``QuarantinedSlot`` marker shows it in
    ``tunefarm workers``. A candidate that fails on both nodes is its own fault: nobody is
    blamed and its result is the error.

    With a ``budget``, each new candidate takes one slot of it before it is built; those past
    the budget are dropped (a build error for MetaSchedule, :attr:`Entry.dropped` for the
    job's recorder), so a search round never overshoots the job's trials.
    """

    def __init__(
        self,
        ledger: Ledger,
        config: MeasureConfig,
        database: TuneFarmDatabase | None = None,
        policy: FaultPolicy | None = None,
        build_fn: str = DEFAULT_BUILD_FN,
        budget: TrialBudget | None = None,
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.budget = budget
        self.config = config
        self.database = database
        self.policy = policy or FaultPolicy()
        self.build_fn = build_fn
        self.wait_sec = 0.0  # driver time blocked on builds, for the job's overhead split
        self.strikes: dict[str, int] = {}  # node id -> blamed builds since its last clean round
        self.quarantined: dict[str, str] = {}  # node id -> why
        self._log = EventLog(log, logging.INFO)
        self.events = self._log.events  # what happened, for logs and tests
        self._markers: list[Any] = []  # QuarantinedSlot actors (live as long as the builder)
        self.stop = threading.Event()  # set on Ctrl-C: the next batch raises Interrupted
        # a timed job's pace: a round is cut to the candidates that fit before its deadline
        self.pace: RoundPace | None = None
        self._warming: list[Any] = []  # warm_task refs not yet waited for
        self.cancelled = 0  # builds cancelled mid-compile (the job stopped or ran out of time)
        self._build_secs: deque[float] = deque(maxlen=SLOW_BUILD_SAMPLE)  # recent clean builds
        self.slow_cut = 0  # builds cut at the slow-compile limit
        self.cut_slow = True  # whether compile_limit may cut below build_timeout_s

    def compile_limit(self) -> float:
        """Seconds a new build may compile: :data:`SLOW_BUILD_FACTOR` x the median of the
        job's recent clean builds (at least :data:`SLOW_BUILD_FLOOR_S`), at most the
        configured ``build_timeout_s`` (which applies alone until the job has
        :data:`SLOW_BUILD_MIN` clean builds, and when ``cut_slow`` is off)."""
        cap = self.config.build_timeout_s
        if not self.cut_slow or len(self._build_secs) < SLOW_BUILD_MIN:
            return cap
        typical = statistics.median(self._build_secs)
        return min(cap, max(SLOW_BUILD_FLOOR_S, SLOW_BUILD_FACTOR * typical))

    def warm_up(self, workers: int) -> None:
        """Start ``workers`` build workers' sandboxes now (their imports), without waiting.

        A job calls it as Ray comes up, so its first builds find the compiler imported. The
        first batch built after it returns only once they have all ended: nothing of the
        warm-up runs beside a measurement that follows it."""
        self._warming += [warm_task.remote() for _ in range(max(0, workers))]

    def _end_warm_up(self) -> None:
        if not self._warming:
            return
        refs, self._warming = self._warming, []
        late = _kill_late(refs, self.policy.startup_timeout_s)
        for ref in set(refs) - set(late):
            try:
                why = ray.get(ref)
            except ray.exceptions.RayError as err:
                why = str(err)
            if why:  # not fatal: the build retries the start and reports it as its error
                self._log.note(f"a build worker's sandbox did not start: {why}", logging.WARNING)

    def submit(
        self,
        mod_json: str,
        target_json: str,
        avoid: tuple[str, ...] = (),
        nodes: set[str] | None = None,
        limit_s: float | None = None,
    ) -> tuple[Any, Any]:
        """One build task, kept off quarantined nodes and ``avoid``: (status ref, artifact ref).

        When no other node with CPUs is left, the task goes wherever Ray puts it (a job must
        not wait forever for a node that does not exist). ``nodes``: the build nodes, when the
        caller already asked Ray for them (once per batch, not once per task). ``limit_s``: the
        seconds it may compile (default: ``build_timeout_s``)."""
        opts: dict[str, Any] = {"max_retries": self.policy.max_attempts - 1}
        exclude = sorted(set(avoid) | set(self.quarantined))
        if exclude and (_build_nodes() if nodes is None else nodes) - set(exclude):
            opts["label_selector"] = {NODE_LABEL: f"!in({','.join(exclude)})"}
        task = build_task.options(**opts)
        limit = self.config.build_timeout_s if limit_s is None else limit_s
        return task.remote(mod_json, target_json, limit, self.build_fn)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        from database import shash_of

        if not build_inputs:
            return []
        # a MetaSchedule round has one target
        candidates = [(shash_of(i.mod), tvm.ir.save_json(i.mod)) for i in build_inputs]
        return self.build_json(candidates, build_inputs[0].target)

    def build_json(
        self, candidates: list[tuple[str, str]], target: tvm.target.Target, cached: bool = True
    ) -> list[BuilderResult]:
        """Build ``candidates`` given as (candidate hash, module JSON) for ``target``: what a
        search actor hands over, so the driver never rebuilds or rehashes a module.
        ``cached=False`` builds candidates the database already measured too (a re-timing)."""
        from database import TargetKey

        if self.stop.is_set():
            raise Interrupted("the job was interrupted")
        keys: list[str] = []
        pending: dict[Any, str] = {}
        args_of: dict[str, tuple[str, str]] = {}
        nodes = _build_nodes() if self.quarantined else None
        target_json = TargetKey.of(target).json
        # NB: ``is not None``: a PyDatabase's truth value is its len(), a COUNT(*) of all records
        stored = (
            self.database.measured([h for h, _ in candidates], target)
            if self.database is not None and cached
            else {}
        )
        new = sum(1 for h, _ in candidates if h not in stored)
        limit = self.compile_limit()
        fit = self.pace.sending(new) if self.pace is not None and new else new
        if new and not fit:  # not even one would be measured in time: the job ends here
            if self.budget is not None:
                self.budget.close("time")
            self.stop.set()
        for candidate_hash, mod_json in candidates:
            entry = Entry(candidate_hash=candidate_hash)
            row = stored.get(candidate_hash)
            if row is not None:
                entry.cached = True
                entry.build = BuildResult()
                entry.run = run_result_of_row(row)
                keys.append(self.ledger.add(entry))
                continue
            why = OVER_TIME if fit <= 0 else None
            fit -= 1
            if why is None and self.budget is not None and not self.budget.take():
                why = OVER_BUDGET
            if why is not None:
                entry.dropped = True
                entry.build = BuildResult(error_kind=ErrorKind.BUILD_ERROR, error_msg=why)
                keys.append(self.ledger.add(entry))
                continue
            key = self.ledger.add(entry)
            keys.append(key)
            args = (mod_json, target_json)
            status_ref, entry.artifact = self.submit(*args, nodes=nodes, limit_s=limit)
            entry.rebuild = functools.partial(lambda a: self.submit(*a)[1], args)
            pending[status_ref] = key
            args_of[key] = args
        start = time.perf_counter()
        self._wait(pending)
        self._note_builds(list(pending.values()), limit)
        self._retry_elsewhere(list(pending.values()), args_of)
        self._end_warm_up()
        self.wait_sec += time.perf_counter() - start
        results = []
        for key in keys:
            entry = self.ledger.get(key)
            assert entry is not None and entry.build is not None
            results.append(BuilderResult(key, entry.build.error_msg))
        return results

    def _note_builds(self, keys: list[str], limit: float) -> None:
        """Learn the job's build times from ``keys``' clean builds; a build cut at ``limit``
        (what they were sent with), when below the configured timeout, becomes the candidate's
        own error (slow, not hung)."""
        for key in keys:
            entry = self.ledger.get(key)
            build = entry.build if entry is not None else None
            if build is None:
                continue
            if build.ok and build.build_sec:
                self._build_secs.append(build.build_sec)
            elif (
                build.error_kind is ErrorKind.BUILD_TIMEOUT
                and limit < self.config.build_timeout_s
                and build.build_sec >= 0.9 * limit  # the sandbox's cut, not a stuck worker
            ):
                self.slow_cut += 1
                entry.build = replace(
                    build,
                    error_msg=ErrorKind.BUILD_TIMEOUT.message(
                        f"compiled for over {limit:.1f} s, {SLOW_BUILD_FACTOR:g}x this job's "
                        "median build: cut as too slow to compile"
                    ),
                    slow=True,
                )

    def _retry_elsewhere(self, keys: list[str], args_of: dict[str, tuple[str, str]]) -> None:
        """Build again, on another node, what crashed or hung; blame and quarantine nodes."""
        blamed: dict[str, int] = {}
        clean: set[str] = set()
        retry: dict[Any, str] = {}
        first: dict[str, str] = {}
        nodes: set[str] | None = None
        for key in keys:
            entry = self.ledger.get(key)
            build = entry.build if entry is not None else None
            if build is None or build.node is None:
                continue
            if build.ok:
                clean.add(build.node)
            elif build.node_suspect and self.policy.max_attempts > 1:
                nodes = _build_nodes() if nodes is None else nodes
                if not nodes - {build.node} - set(self.quarantined):
                    continue  # nowhere else to try
                status_ref, entry.artifact = self.submit(
                    *args_of[key], avoid=(build.node,), nodes=nodes
                )
                retry[status_ref] = key
                first[key] = build.node
        self._wait(retry)
        for key in retry.values():
            entry = self.ledger.get(key)
            build = entry.build if entry is not None else None
            if build is not None and build.ok:  # built elsewhere: the first node was at fault
                node = first[key]
                blamed[node] = blamed.get(node, 0) + 1
                self._log.note(f"blamed build node {node[:12]}: {key} built on another node")
                if build.node:
                    clean.add(build.node)
        for node in clean - set(blamed):
            self.strikes[node] = 0
        for node, count in blamed.items():
            self.strikes[node] = self.strikes.get(node, 0) + count
            if self.strikes[node] >= self.policy.quarantine_after and node not in self.quarantined:
                self._quarantine(node, f"{self.strikes[node]} builds crashed or hung there")

    def _quarantine(self, node: str, why: str) -> None:
        self.quarantined[node] = why
        self._log.note(f"quarantined build node {node[:12]}: {why}", logging.WARNING)
        marker = SlotSpec(f"builder@{node[:12]}", node_id=node).mark_quarantined(why)
        self._markers.append(marker)

    def _cut_now(self) -> str | None:
        """Why builds still compiling are no longer wanted: the job was stopped (Ctrl-C), or
        its time budget is up (they would be measured after it); None while they are."""
        if self.pace is not None and self.pace.left() <= 0:
            return OVER_TIME_BUILDING
        return STOPPED if self.stop.is_set() else None

    def _wait(self, pending: dict[Any, str]) -> None:
        if not pending:
            return
        # The child enforces build_timeout_s; this deadline only catches a stuck worker.
        waves = math.ceil(len(pending) / RayConnection.cpus())
        deadline = time.monotonic() + (
            (self.config.build_timeout_s + 30) * waves * self.policy.max_attempts + 30
        )
        refs = list(pending)
        while refs:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            why = self._cut_now()
            if why is not None:
                self._cut(refs, pending, why)
                refs = []
                break
            poll = min(left, 1.0)
            if self.pace is not None:  # wake at the job's deadline, not up to a poll later
                poll = max(0.01, min(poll, self.pace.left()))
            done, refs = ray.wait(refs, num_returns=len(refs), timeout=poll)
            for ref in done:
                entry = self.ledger.get(pending[ref])
                assert entry is not None
                entry.build = _build_status(ref)
        for ref in refs:
            ray.cancel(ref, force=True)
            entry = self.ledger.get(pending[ref])
            assert entry is not None
            entry.build = BuildResult(
                error_kind=ErrorKind.BUILD_TIMEOUT,
                error_msg=ErrorKind.BUILD_TIMEOUT.message("no answer from the build worker"),
            )
        for key in pending.values():
            entry = self.ledger.get(key)
            if entry is not None and entry.build is not None and not entry.build.ok:
                entry.artifact = None

    def _cut(self, refs: list[Any], pending: dict[Any, str], why: str) -> None:
        """Cancel builds still compiling: dropped like candidates past the budget, no node
        blamed. The cancel interrupts the task, which kills its sandbox's compiler and keeps
        the worker (the next build starts a new compiler child, not a new worker)."""
        for ref in refs:
            ray.cancel(ref)
        # a cancel that reaches the task before its body runs can be lost (the compile then
        # holds its CPU until the build timeout: once in a full CI run, the next builds
        # waited 118 s): whatever has not ended after a short grace is killed with its worker
        # (the sandbox's compiler dies with it: PR_SET_PDEATHSIG)
        if refs:
            _kill_late(refs, CUT_GRACE_S)
        for ref in refs:
            entry = self.ledger.get(pending[ref])
            assert entry is not None
            entry.dropped = True
            entry.build = BuildResult(error_kind=ErrorKind.BUILD_ERROR, error_msg=why)
        self.cancelled += len(refs)
        self._log.note(f"cancelled {len(refs)} build(s) still compiling: {why}")


def _build_status(ref: Any) -> BuildResult:
    """The status of a finished build task; a lost worker or garbage becomes a value."""
    try:
        value = ray.get(ref)
    except ray.exceptions.RayError as err:
        kind = ErrorKind.WORKER_DIED
        return BuildResult(error_kind=kind, error_msg=kind.message(str(err)))
    if not isinstance(value, BuildResult):
        kind = ErrorKind.BUILD_ERROR
        msg = kind.message(f"build task returned {type(value).__name__}, not a BuildResult")
        return BuildResult(error_kind=kind, error_msg=msg)
    return value
