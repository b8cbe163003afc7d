"""What a job prepares in the driver while Ray starts.

Starting the embedded Ray instance (``ray.init``) takes 5-6 s on a 2-core EPYC, nearly all of
it in Ray's own processes while the driver waits. The search's own start-up needs only the
driver: TVM's tensor intrinsics (TVMScript parsing, ~1.5 s there) and the job's cost model (a
warm one loads the team's base model and featurizes the local history). :class:`SearchPrep`
makes both in a thread begun before the connection; the job waits for them before it times
anything.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import tvm

from database import Storage
from tuner.cost_model import create_cost_model
from tuner.fastimport import preload_tensor_intrin

log = logging.getLogger("tunefarm.job")


class SearchPrep:
    """TVM's tensor intrinsics and a job's cost model, made in a thread of the driver."""

    def __init__(
        self,
        target: tvm.target.Target,
        storage: Storage,
        mods: list[tvm.IRModule],
        cost_model: str,
        seed: int | None,
        warm: bool,
    ) -> None:
        def make() -> tuple[Any, str]:
            preload_tensor_intrin(target)
            model, note = create_cost_model(
                cost_model, storage=storage, target=target, mods=mods, seed=seed, warm=warm
            )
            log.info("cost model %s: %s", cost_model, note)
            return model, note

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tunefarm-prep")
        self._future: Future[tuple[Any, str]] = self._pool.submit(make)
        self._pool.shutdown(wait=False)  # the thread ends with its one call

    def cost_model(self) -> Any:
        """The job's cost model (waits for it; raises what making it raised)."""
        return self._future.result()[0]

    def note(self) -> str | None:
        """How the cost model started (``create_cost_model``'s note); None until it is made,
        or when making it failed."""
        if not self._future.done() or self._future.exception() is not None:
            return None
        return self._future.result()[1]

    def close(self) -> None:
        """Wait for the thread to end (a job that fails before its search leaves none behind);
        what it raised was the search's to report, and there is no search."""
        with contextlib.suppress(Exception):  # cost_model() reports it, if anyone asks
            self._future.result()
        self._pool.shutdown(wait=True)


__all__ = ["SearchPrep"]
