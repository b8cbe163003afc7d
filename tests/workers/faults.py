"""Fault-injecting builders and runners for the pool's tests (run in workers and children)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from workers.config import MeasureConfig
from workers.results import BuildResult, RunResult


# ----------------------------------------------------------------- builders (in the sandbox)
def hang_build(mod_json: str, target_json: str) -> Any:
    time.sleep(3600)


def crash_build(mod_json: str, target_json: str) -> Any:
    os.kill(os.getpid(), signal.SIGSEGV)


def garbage_build(mod_json: str, target_json: str) -> Any:
    return "not a build result"


def flaky_build(mod_json: str, target_json: str) -> tuple[BuildResult, bytes | None]:
    """Hangs on kernels whose JSON mentions 'hang_me', else builds normally."""
    from workers.build import build_artifact

    if "hang_me" in mod_json:
        time.sleep(3600)
    return build_artifact(mod_json, target_json)


BROKEN_NODE_ENV = "TUNEFARM_TEST_BROKEN_COMPILER"


def broken_node_build(mod_json: str, target_json: str) -> tuple[BuildResult, bytes | None]:
    """Crashes (SIGSEGV) on a node started with ``BROKEN_NODE_ENV`` set, builds elsewhere."""
    from workers.build import build_artifact

    if os.environ.get(BROKEN_NODE_ENV):
        os.kill(os.getpid(), signal.SIGSEGV)
    return build_artifact(mod_json, target_json)


# ----------------------------------------------------------------- runners (in the actor)
def die_measure(artifact: bytes, args_info: list, device: str, config: MeasureConfig) -> Any:
    os._exit(3)


def hang_measure(artifact: bytes, args_info: list, device: str, config: MeasureConfig) -> Any:
    time.sleep(3600)


def garbage_measure(artifact: bytes, args_info: list, device: str, config: MeasureConfig) -> Any:
    return {"run_secs": "garbage"}


def fake_measure(artifact: Any, args_info: list, device: str, config: MeasureConfig) -> RunResult:
    """Sleeps ``artifact['sleep']`` seconds and answers who measured which candidate."""
    time.sleep(float(artifact.get("sleep", 0.0)) if isinstance(artifact, dict) else 0.0)
    return RunResult(run_secs=(1e-3,), device=device, worker=f"{os.getpid()}")


def interval_measure(artifact: Any, args_info: list, device: str, config: MeasureConfig) -> Any:
    """Sleeps ``artifact['sleep']`` s (or dies after it with ``artifact['die']``); the run
    seconds are the wall-clock start and end of the measurement."""
    start = time.time()
    time.sleep(float(artifact.get("sleep", 0.0)))
    if artifact.get("die"):
        os._exit(1)
    return RunResult(run_secs=(start, time.time()), device=device, worker=f"{os.getpid()}")
