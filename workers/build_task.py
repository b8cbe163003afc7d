"""The Ray side of a build: a task that hands the candidate to its worker's sandbox child.

Nothing here imports TVM. The compiler runs in the sandbox child (:mod:`workers.sandbox`,
which imports :mod:`workers.build` once when it starts); the worker process only forwards the
call. Defined beside TVM's imports, the task cost each build worker a second ``import tvm``
(1.5 s of a core on a 2-core EPYC) before its first build.

:func:`warm_task` starts a worker's sandbox ahead of its first build: a job sends one per
build CPU while it prepares its search, so the first round does not wait on the imports.
"""

from __future__ import annotations

import dataclasses
import os
import time

import ray

from workers.results import BUILDER_CRASHED, BuildResult, ErrorKind
from workers.sandbox import Sandbox, SandboxFailure, shared_sandbox

DEFAULT_BUILD_FN = "workers.build:build_artifact"


def sandboxed_build(
    mod_json: str,
    target_json: str,
    timeout_s: float,
    build_fn: str = DEFAULT_BUILD_FN,
    sandbox: Sandbox | None = None,
) -> tuple[BuildResult, bytes | None]:
    """``build_fn`` in a killable child process (by default this process's shared one): a
    build that hangs past ``timeout_s``, crashes or returns garbage becomes an error value."""
    start = time.perf_counter()
    worker = f"{os.uname().nodename}:{os.getpid()}"
    box = sandbox or shared_sandbox()
    out = box.call(build_fn, (mod_json, target_json), timeout_s)
    if isinstance(out, SandboxFailure):
        kind = ErrorKind.BUILD_TIMEOUT if out.timed_out else ErrorKind.BUILD_ERROR
        detail = out.detail if out.reason != "crashed" else f"{BUILDER_CRASHED}: {out.detail}"
        return (
            BuildResult(
                error_kind=kind,
                error_msg=kind.message(detail),
                build_sec=time.perf_counter() - start,
                worker=worker,
                crashed=out.reason == "crashed",
            ),
            None,
        )
    if (
        not isinstance(out, tuple)
        or len(out) != 2
        or not isinstance(out[0], BuildResult)
        or not (out[1] is None or isinstance(out[1], bytes))
        or (out[0].ok and not out[1])
    ):
        kind = ErrorKind.BUILD_ERROR
        msg = kind.message(f"builder returned {type(out).__name__}, not (BuildResult, bytes)")
        return BuildResult(error_kind=kind, error_msg=msg, worker=worker), None
    return out


@ray.remote(num_returns=2)
def build_task(
    mod_json: str, target_json: str, timeout_s: float, build_fn: str
) -> tuple[BuildResult, bytes | None]:
    """One build on a Ray worker (one CPU), its result tagged with the worker's node."""
    result, data = sandboxed_build(mod_json, target_json, timeout_s, build_fn)
    return dataclasses.replace(result, node=ray.get_runtime_context().get_node_id()), data


@ray.remote
def warm_task() -> str | None:
    """Start this worker's sandbox (its imports) now; why it could not start, or None."""
    failure = shared_sandbox().start()
    return None if failure is None else f"{failure.reason}: {failure.detail}"
