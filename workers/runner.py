"""A MetaSchedule runner that measures built candidates on the cluster's device actors, one
at a time per device, through a :class:`~workers.runner_pool.RunnerPool`: the runner fetches
each artifact from Ray's object store by the key the builder left in the job's ledger."""

from __future__ import annotations

import time
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import (
    PyRunner,
    PyRunnerFuture,
    RunnerFuture,
    RunnerInput,
    RunnerResult,
)

from workers.config import FaultPolicy, MeasureConfig, Screen
from workers.ledger import Ledger
from workers.results import ErrorKind, RunResult
from workers.runner_pool import PoolFuture, RunnerPool
from workers.slots import SlotSpec, discover_slots


@derived_object
class RayRunnerFuture(PyRunnerFuture):
    """The pending measurement of one candidate in the runner pool."""

    def __init__(self, runner: RayRunner, key: str, future: PoolFuture | None) -> None:
        super().__init__()
        self.runner = runner
        self.key = key
        self.future = future

    def done(self) -> bool:
        return self.future is None or self.future.done()

    def result(self) -> RunnerResult:
        entry = self.runner.ledger.get(self.key)
        assert entry is not None
        if self.future is not None and entry.run is None:
            start = time.perf_counter()
            entry.run = self.future.result()
            self.runner.wait_sec += time.perf_counter() - start
            self.runner.device_sec += entry.run.device_sec or 0.0
            self.runner.screened += entry.run.screened
        run = entry.run
        assert run is not None
        if run.ok:
            return RunnerResult([float(s) for s in run.run_secs or ()], None)
        return RunnerResult(None, run.error_msg)


@derived_object
class RayRunner(PyRunner):
    """Measures built candidates on the cluster's device actors, one at a time per device.

    ``slots`` default to the devices of ``device_kind`` found in the cluster
    (:func:`workers.runner_pool.discover_slots`). ``exclusive``: :meth:`run` returns only
    once every candidate is measured, so nothing its caller starts next (MetaSchedule's task
    loop goes on to the next task's search and builds while the runner's futures are
    pending) shares the cores the measurement runs on: for the host CPU of a one-node
    cluster. There, overlapped, a QKV job's own timings came out 1.04-1.82x (median 1.41x)
    what its final kernels took re-timed on a quiet machine, and the search chose by them.
    """

    def __init__(
        self,
        ledger: Ledger,
        config: MeasureConfig,
        device_kind: str = "cpu",
        slots: list[SlotSpec] | None = None,
        policy: FaultPolicy | None = None,
        exclusive: bool = False,
    ) -> None:
        super().__init__()
        self.exclusive = exclusive
        self.ledger = ledger
        self.config = config
        self.device_kind = device_kind
        self.slot_specs = slots
        self.policy = policy
        self._pool: RunnerPool | None = None
        self.wait_sec = 0.0  # driver time blocked on measurements, for the overhead split
        self.device_sec = 0.0  # the devices' busy time on the candidates measured
        self.screened = 0  # candidates timed by their single runs alone (MeasureConfig.screen)

    def has_devices(self) -> bool:
        """Whether the cluster has a device of this kind that can measure (asks once)."""
        if self.slot_specs is None:
            self.slot_specs = discover_slots(self.device_kind)
        return bool(self.slot_specs)

    def no_device_message(self) -> str:
        """One line: why no device of this kind can measure."""
        if self.device_kind == "cuda":
            from workers.gpu import no_usable_gpu_message

            return no_usable_gpu_message()
        return f"the cluster has no {self.device_kind} device to measure on"

    @property
    def pool(self) -> RunnerPool:
        if self._pool is None:
            if not self.has_devices():
                raise RuntimeError(self.no_device_message())
            assert self.slot_specs is not None
            self._pool = RunnerPool(self.slot_specs, self.config, self.policy)
        return self._pool

    def warm_up(self) -> None:
        """Start the device actors now (their imports), ahead of the first measurement."""
        if self.has_devices():
            self.pool.warm_up()

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        return self.run_json(
            [(inp.artifact_path, [arg.as_json() for arg in inp.args_info]) for inp in runner_inputs]
        )

    def run_json(
        self,
        inputs: list[tuple[str, Any]],
        best_sec: float | None = None,
        group: str | None = None,
    ) -> list[RunnerFuture]:
        """Measure built candidates given as (builder key, arguments as a record stores them).
        ``best_sec``: their task's best so far, ``group``: the task; a candidate whose single
        runs are all at least :attr:`MeasureConfig.screen` x the lesser of that best and the
        fastest of the task its runner has timed is timed by them alone
        (:class:`~workers.config.Screen`, :func:`workers.measure.timed_secs`)."""
        # nothing to screen by (MetaSchedule's loop, a re-timing): sent as before
        known = best_sec is not None or group is not None
        screen = Screen(best_sec, group) if self.config.screen and known else None
        futures: list[RunnerFuture] = []
        for key, args_info in inputs:
            entry = self.ledger.get(key)
            if entry is None or entry.cached or entry.artifact is None:
                if entry is not None and entry.run is None:
                    entry.run = RunResult(
                        error_kind=ErrorKind.RUN_ERROR,
                        error_msg=ErrorKind.RUN_ERROR.message("no artifact to run"),
                    )
                futures.append(RayRunnerFuture(self, key, None))
                continue
            fut = self.pool.submit(entry.artifact, args_info, key, entry.rebuild, screen)
            futures.append(RayRunnerFuture(self, key, fut))
        if self.exclusive:
            for f in futures:
                f.result()  # kept in the ledger: the caller's result() answers from there
        return futures

    def remeasure(self, key: str, args_info: Any) -> RunResult | None:
        """Measure the candidate ``key`` once more, on its artifact still in the ledger (the
        recorder releases it with the entry): its new run result, or None when the artifact is
        gone (a cached or failed candidate)."""
        entry = self.ledger.get(key)
        if entry is None or entry.artifact is None:
            return None
        start = time.perf_counter()
        run = self.pool.submit(entry.artifact, args_info, key, entry.rebuild).result()
        self.wait_sec += time.perf_counter() - start
        self.device_sec += run.device_sec or 0.0
        return run

    def shutdown(self) -> None:
        """Stop the device actors."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
