"""Time one built candidate on a local device."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import tvm

from database.errors import error_summary
from workers.config import MeasureConfig
from workers.fingerprint import device_fingerprint
from workers.results import ErrorKind, RunResult


def alloc_arg(info: Any, dev: tvm.runtime.Device, rng: np.random.Generator) -> Any:
    """One argument as a record stores it: ``["TENSOR", dtype, shape]`` (random values on
    ``dev``) or ``["SCALAR", dtype, value]`` (an integer, as a range kernel's tile count)."""
    kind, dtype = info[0], info[1]
    if kind == "SCALAR":
        return int(info[2])
    if kind != "TENSOR":
        raise ValueError(f"unsupported argument kind {kind!r}")
    shape = [int(x) for x in info[2]]
    if dtype.startswith(("float", "bfloat")):
        host = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    else:
        host = rng.integers(0, 8, size=shape).astype(dtype)
    return tvm.runtime.tensor(host, device=dev)


def _alloc(args_info: list[Any], dev: tvm.runtime.Device, rng: np.random.Generator) -> list:
    return [alloc_arg(info, dev, rng) for info in args_info]


@contextlib.contextmanager
def _loaded(artifact: bytes) -> Iterator[Any]:
    """The runtime module of a shared-library artifact (written to a private temp dir)."""
    with tempfile.TemporaryDirectory(prefix="tunefarm-run-") as tmp:
        path = os.path.join(tmp, "artifact.so")
        with open(path, "wb") as f:
            f.write(artifact)
        yield tvm.runtime.load_module(path)


def measure_artifact(
    artifact: bytes,
    args_info: list[Any],
    device_kind: str,
    config: MeasureConfig,
) -> RunResult:
    """Load ``artifact`` (a ``.so``), run its entry on random inputs and return run seconds."""
    device = device_fingerprint(device_kind)
    worker = f"{os.uname().nodename}:{os.getpid()}"
    try:
        dev = tvm.device(device_kind, 0)
        with _loaded(artifact) as rt_mod:
            args = _alloc(args_info, dev, np.random.default_rng(0))
            evaluator = rt_mod.time_evaluator(
                rt_mod.entry_name,
                dev,
                number=config.number,
                repeat=config.repeat,
                min_repeat_ms=config.min_repeat_ms,
                f_preproc="cache_flush_cpu_non_first_arg" if config.cache_flush else "",
            )
            dev.sync()
            secs = tuple(float(s) for s in evaluator(*args).results)
            if config.cooldown_ms:
                time.sleep(config.cooldown_ms / 1000)
    except Exception as err:
        return _error(ErrorKind.RUN_ERROR, error_summary(err, limit=500), device, worker)
    return _checked(secs, device, worker)


def measure_vm(
    artifact: bytes,
    args_info: list[Any],
    device_kind: str,
    config: MeasureConfig,
) -> RunResult:
    """Load ``artifact`` (an exported Relax VM library), time its ``main`` on random inputs.

    ``tunefarm bench --address`` measures whole models this way on the cluster's runners.
    Needs only TVM's runtime (a runner node may carry no compiler)."""
    from tvm.runtime.vm import VirtualMachine

    device = device_fingerprint(device_kind)
    worker = f"{os.uname().nodename}:{os.getpid()}"
    try:
        dev = tvm.device(device_kind, 0)
        with _loaded(artifact) as lib:
            vm = VirtualMachine(lib, dev)
            args = _alloc(args_info, dev, np.random.default_rng(0))
            vm["main"](*args)  # warm up (first-call allocation)
            evaluator = vm.time_evaluator(
                "main",
                dev,
                number=config.number,
                repeat=config.repeat,
                min_repeat_ms=config.min_repeat_ms,
            )
            dev.sync()
            secs = tuple(float(s) for s in evaluator(*args).results)
    except Exception as err:
        return _error(ErrorKind.RUN_ERROR, error_summary(err, limit=500), device, worker)
    return _checked(secs, device, worker)


def _error(kind: ErrorKind, detail: str, device: str, worker: str) -> RunResult:
    return RunResult(error_kind=kind, error_msg=kind.message(detail), device=device, worker=worker)


def _checked(secs: tuple[float, ...], device: str, worker: str) -> RunResult:
    """Run times as a result; missing, non-finite or non-positive ones are invalid."""
    if not secs or any(not math.isfinite(s) or s <= 0 for s in secs):
        return _error(ErrorKind.INVALID_RESULT, f"bad run times {secs}", device, worker)
    return RunResult(run_secs=secs, device=device, worker=worker)
