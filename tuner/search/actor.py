"""The actor that hosts the search states of a few tasks: on Ray, or in a thread of the driver."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray

from database.errors import error_summary
from tuner.search.task import Candidate, ModelSpec, Rows, TaskSearch, TaskSpec


class SearchActor:
    """Search states of the tasks the driver placed here, sharing one copy of the job's cost
    model (built from the job's model, which travels once through the object store), as
    MetaSchedule's own task scheduler shares one model among its tasks: a round measured for
    any task here updates it once, and the next round of every task here ranks with it.

    Reserves no CPU (a search must never keep builds from being scheduled on a small node);
    its threads are sized from its node's cores and the searches sharing them.
    """

    def __init__(self, target_json: str, model: ModelSpec, threads: int) -> None:
        import tvm

        from tuner.fastimport import preload_tensor_intrin

        self.target = tvm.target.Target(__import__("json").loads(target_json))
        preload_tensor_intrin(self.target)
        self.threads = threads
        self.tasks: dict[int, TaskSearch] = {}
        self.busy_sec = 0.0  # time spent searching, for the job's figures
        start = time.perf_counter()
        self.model = model.create(threads)  # the tasks' shared cost model
        self.busy_sec += time.perf_counter() - start

    def add(self, spec: TaskSpec) -> int:
        """Build the state of ``spec``'s task here (replacing one of the same id)."""
        start = time.perf_counter()
        self.tasks[spec.task_id] = TaskSearch(spec, self.target, self.model, self.threads)
        self.busy_sec += time.perf_counter() - start
        return spec.task_id

    def generate(self, task_id: int) -> list[Candidate] | None:
        """The next round of ``task_id``; None when its search is exhausted."""
        start = time.perf_counter()
        try:
            return self.tasks[task_id].generate()
        finally:
            self.busy_sec += time.perf_counter() - start

    def seed(self, task_id: int, seeds: list[Any]) -> int:
        """Schedules for ``task_id``'s next round (:meth:`TaskSearch.seed`); how many kept."""
        start = time.perf_counter()
        try:
            return self.tasks[task_id].seed(seeds)
        finally:
            self.busy_sec += time.perf_counter() - start

    def notify(
        self,
        task_id: int,
        results: list[tuple[list[float] | None, str | None]],
        build_secs: list[float | None] | None = None,
    ) -> Rows | None:
        """Results of ``task_id``'s oldest round not yet notified, and what each candidate
        took to compile (:meth:`TaskSearch.notify`). The cost-model rows they
        gave (the shared model here learned them) are returned for the other actors (shared
        learning: every actor's copy trains on every task's measurements)."""
        start = time.perf_counter()
        try:
            return self.tasks[task_id].notify(results, build_secs)
        finally:
            self.busy_sec += time.perf_counter() - start

    def absorb(self, rows: Rows | None) -> None:
        """Another actor's task's cost-model rows, into the model here (used at its next
        refit)."""
        add = getattr(self.model, "add_local", None)
        if rows is not None and add is not None:
            add(*rows)

    def features(self) -> dict[Any, Any]:
        """Measured candidates' features of every task here (for the next warm start)."""
        get = getattr(self.model, "measured_features", None)
        return get() if get is not None else {}

    def stats(self) -> dict[str, Any]:
        """Where the actor runs and how long it searched."""
        # (never ray.init from here: a thread-hosted actor outside a Ray job has no node)
        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return {"node": node, "busy_sec": self.busy_sec}


RemoteSearchActor = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)(SearchActor)


class LocalTaskError(RuntimeError):
    """A search call in a :class:`ThreadSearchActor` raised (the cause is chained)."""


class _Method:
    def __init__(self, host: ThreadSearchActor, name: str) -> None:
        self.host, self.name = host, name

    def remote(self, *args: Any) -> Future:
        return self.host.submit(self.name, *args)


class ThreadSearchActor:
    """A :class:`SearchActor` hosted by one thread of the driver's process, called as a Ray
    actor is (``actor.generate.remote(task)`` returns a future; calls run one at a time, in
    order). It costs no process and no second TVM import; MetaSchedule's C++ search releases
    the GIL, so the driver goes on with the round's builds while it searches."""

    def __init__(self, target_json: str, model: ModelSpec, threads: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tunefarm-search")
        self._init = self.pool.submit(SearchActor, target_json, model, threads)

    def submit(self, name: str, *args: Any) -> Future:
        def call() -> Any:
            resolved = [a.result() if isinstance(a, Future) else a for a in args]
            try:
                return getattr(self._init.result(), name)(*resolved)
            except Exception as err:
                raise LocalTaskError(error_summary(err)) from err

        return self.pool.submit(call)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_") or not callable(getattr(SearchActor, name, None)):
            raise AttributeError(name)
        return _Method(self, name)

    def stop(self) -> None:
        """Drop the calls not started and wait for the one running (at most a round)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
