"""MetaSchedule builders and runners whose work runs as Ray tasks and actors.

Builders are Ray tasks (one CPU each) that return the compiled artifact into Ray's object
store; runners are Ray actors, one per device, that fetch the artifact from the object store
and time one candidate at a time. Nothing travels through a shared filesystem.

MetaSchedule only passes an ``artifact_path`` string from builder to runner; here it is a key
into a :class:`Ledger` that holds the object reference and the full results (error kinds,
device, worker) for the job's recorder.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import (
    PyRunner,
    PyRunnerFuture,
    RunnerFuture,
    RunnerInput,
    RunnerResult,
)

from workers.build import build_artifact
from workers.config import MeasureConfig
from workers.measure import measure_artifact
from workers.results import BuildResult, ErrorKind, RunResult

if TYPE_CHECKING:
    from database import TuneFarmDatabase

log = logging.getLogger("tunefarm.workers")


# --------------------------------------------------------------------------- Ray lifecycle
class RayConnection:
    """Connect to a Ray cluster (``address``) or start an embedded local instance.

    Use as a context manager; a local instance started here is shut down on exit.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.started = False

    def __enter__(self) -> RayConnection:
        if ray.is_initialized():
            return self
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs: dict[str, Any] = {
            "logging_level": logging.ERROR,
            "log_to_driver": False,
            "include_dashboard": False,
        }
        if self.address:
            ray.init(address=self.address, **kwargs)
        else:
            ray.init(num_cpus=self.num_cpus or os.cpu_count() or 1, **kwargs)
            self.started = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            ray.shutdown()
            self.started = False

    @staticmethod
    def cpus() -> int:
        """CPUs the connected cluster offers (at least 1)."""
        return max(1, int(ray.cluster_resources().get("CPU", 1)))


@ray.remote(num_returns=2, max_retries=0)
def _build_task(mod_json: str, target_json: str) -> tuple[BuildResult, bytes | None]:
    return build_artifact(mod_json, target_json)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)
class DeviceRunner:
    """A Ray actor owning one device; it measures one candidate at a time."""

    def __init__(self, device_kind: str, config: MeasureConfig) -> None:
        self.device_kind = device_kind
        self.config = config

    def measure(self, artifact: bytes, args_info: list[Any]) -> RunResult:
        return measure_artifact(artifact, args_info, self.device_kind, self.config)

    def ping(self) -> str:
        return f"{os.uname().nodename}:{os.getpid()}"


# --------------------------------------------------------------------------- ledger
@dataclass
class Entry:
    """Everything known about one candidate between build, run and record."""

    candidate_hash: str
    build: BuildResult | None = None
    run: RunResult | None = None
    artifact: Any = None  # ray.ObjectRef of the .so bytes
    cached: bool = False  # measured in an earlier job: nothing was built or run


@dataclass
class Ledger:
    """Shared by the builder, the runner and the recorder of one job (thread-safe)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry: Entry) -> str:
        with self._lock:
            key = f"ray-artifact:{next(self._ids)}"
            self.entries[key] = entry
            return key

    def get(self, key: str | None) -> Entry | None:
        with self._lock:
            return self.entries.get(key or "")

    def pop(self, key: str | None) -> Entry | None:
        with self._lock:
            return self.entries.pop(key or "", None)


def _run_secs_of_row(row: Any) -> RunResult:
    import json

    if row.mean_sec is None:
        kind = ErrorKind(row.error_kind) if row.error_kind else ErrorKind.RUN_ERROR
        return RunResult(
            error_kind=kind, error_msg=kind.message(row.error_msg or "measured before")
        )
    return RunResult(run_secs=tuple(json.loads(row.run_secs_json)), device=row.device)


# --------------------------------------------------------------------------- builder
@derived_object
class RayBuilder(PyBuilder):
    """Builds candidates as Ray tasks; skips candidates already measured on the target."""

    def __init__(
        self,
        ledger: Ledger,
        config: MeasureConfig,
        database: TuneFarmDatabase | None = None,
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.config = config
        self.database = database

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        from database import TargetKey, shash_of

        keys: list[str] = []
        pending: dict[Any, str] = {}
        for inp in build_inputs:
            entry = Entry(candidate_hash=shash_of(inp.mod))
            row = (
                self.database.measured(entry.candidate_hash, inp.target) if self.database else None
            )
            if row is not None:
                entry.cached = True
                entry.build = BuildResult()
                entry.run = _run_secs_of_row(row)
                keys.append(self.ledger.add(entry))
                continue
            key = self.ledger.add(entry)
            keys.append(key)
            status_ref, artifact_ref = _build_task.remote(
                tvm.ir.save_json(inp.mod), TargetKey.of(inp.target).json
            )
            entry.artifact = artifact_ref
            pending[status_ref] = key
        self._wait(pending)
        results = []
        for key in keys:
            entry = self.ledger.get(key)
            assert entry is not None and entry.build is not None
            results.append(BuilderResult(key, entry.build.error_msg))
        return results

    def _wait(self, pending: dict[Any, str]) -> None:
        if not pending:
            return
        waves = math.ceil(len(pending) / RayConnection.cpus())
        timeout = self.config.build_timeout_s * waves + 10
        refs = list(pending)
        done, not_done = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for ref in done:
            entry = self.ledger.get(pending[ref])
            assert entry is not None
            try:
                entry.build = ray.get(ref)
            except ray.exceptions.RayError as err:
                entry.build = BuildResult(
                    error_kind=ErrorKind.WORKER_DIED,
                    error_msg=ErrorKind.WORKER_DIED.message(str(err)),
                )
        for ref in not_done:
            ray.cancel(ref, force=True)
            entry = self.ledger.get(pending[ref])
            assert entry is not None
            entry.build = BuildResult(
                error_kind=ErrorKind.BUILD_TIMEOUT,
                error_msg=ErrorKind.BUILD_TIMEOUT.message(
                    f"no result within {self.config.build_timeout_s:.0f} s"
                ),
            )
        for key in pending.values():
            entry = self.ledger.get(key)
            if entry is not None and entry.build is not None and not entry.build.ok:
                entry.artifact = None


# --------------------------------------------------------------------------- runner
@derived_object
class RayRunnerFuture(PyRunnerFuture):
    """The pending measurement of one candidate on a runner actor."""

    def __init__(self, runner: RayRunner, key: str, ref: Any) -> None:
        super().__init__()
        self.runner = runner
        self.key = key
        self.ref = ref

    def done(self) -> bool:
        if self.ref is None:
            return True
        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def result(self) -> RunnerResult:
        entry = self.runner.ledger.get(self.key)
        assert entry is not None
        if self.ref is not None and entry.run is None:
            entry.run = self.runner.collect(self.ref)
        entry.artifact = None  # release the object-store copy
        run = entry.run
        assert run is not None
        if run.ok:
            return RunnerResult([float(s) for s in run.run_secs or ()], None)
        return RunnerResult(None, run.error_msg)


@derived_object
class RayRunner(PyRunner):
    """Measures built candidates on a device actor, one at a time."""

    def __init__(self, ledger: Ledger, config: MeasureConfig, device_kind: str = "cpu") -> None:
        super().__init__()
        self.ledger = ledger
        self.config = config
        self.device_kind = device_kind
        self._actor: Any = None

    @property
    def actor(self) -> Any:
        if self._actor is None:
            self._actor = DeviceRunner.remote(self.device_kind, self.config)
        return self._actor

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        futures = []
        for inp in runner_inputs:
            key = inp.artifact_path
            entry = self.ledger.get(key)
            if entry is None or entry.cached or entry.artifact is None:
                if entry is not None and entry.run is None:
                    entry.run = RunResult(
                        error_kind=ErrorKind.RUN_ERROR,
                        error_msg=ErrorKind.RUN_ERROR.message("no artifact to run"),
                    )
                futures.append(RayRunnerFuture(self, key, None))
                continue
            args_info = [arg.as_json() for arg in inp.args_info]
            ref = self.actor.measure.remote(entry.artifact, args_info)
            futures.append(RayRunnerFuture(self, key, ref))
        return futures

    def collect(self, ref: Any) -> RunResult:
        """Wait for one measurement; a hung or dead runner becomes an error value."""
        try:
            return ray.get(ref, timeout=self.config.run_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._restart()
            return RunResult(
                error_kind=ErrorKind.RUN_TIMEOUT,
                error_msg=ErrorKind.RUN_TIMEOUT.message(
                    f"no result within {self.config.run_timeout_s:.0f} s"
                ),
            )
        except ray.exceptions.RayError as err:
            self._restart()
            return RunResult(
                error_kind=ErrorKind.WORKER_DIED,
                error_msg=ErrorKind.WORKER_DIED.message(str(err)),
            )

    def _restart(self) -> None:
        if self._actor is not None:
            ray.kill(self._actor, no_restart=True)
        self._actor = None

    def shutdown(self) -> None:
        """Stop the device actor."""
        self._restart()
