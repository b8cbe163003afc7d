"""Time one built candidate on a local device."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
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


FLOOR = 0.5  # the share of min_repeat_ms that TVM still enforces on each repeat
# What a single run may take over the kernel's own time: one call's thread-pool wake-up and
# barrier (a few us for a parallel kernel; tuner.symbolic.dispatch.CALL_FLOOR_SEC). A screen
# (MeasureConfig.screen_sec) counts a candidate's single runs only this far above it, so a
# kernel of a few us near its task's best is not screened by that overhead (a 16^3 matmul's
# single runs read 0.09 us against 0.04 us timed in repeats).
SINGLE_RUN_SLACK_SEC = 5e-6


def timed_secs(
    evaluator_of: Callable[..., Any],
    args: list[Any],
    config: MeasureConfig,
    one_long_run: bool = True,
) -> tuple[tuple[float, ...], bool]:
    """Run times of ``config.repeat`` repeats, each sized to last ``config.min_repeat_ms``.

    ``evaluator_of(number, repeat, min_repeat_ms)`` makes a TVM ``time_evaluator``. Left to
    itself, TVM sizes ``number`` to just over the minimum (``floor(min / t) + 1`` runs) and,
    whenever noise puts a repeat under it, runs that repeat again with 1.618x the runs,
    keeping the larger number for the repeats after: a 2.8 ms kernel asked for 3 x 50 ms was
    timed for 160-270 ms, 265 ms typically. Here ``repeat`` single runs (after TVM's warm-up
    run) come first: a kernel slower than the minimum is done (what TVM would have run), and
    a shorter one gets ``number`` sized from the fastest of them to fill the minimum. TVM
    still enforces :data:`FLOOR` of the minimum, which resizes a repeat only where those
    first runs were far slower than the kernel really is (an emulated device translating
    code), not on a machine's ordinary noise.

    A kernel whose first run alone lasts ``repeat`` x ``min_repeat_ms`` (what all the repeats
    together are asked to last) is timed by that run: an untuned 0.7 s matmul took four runs
    (TVM's warm-up and 3 repeats), 2.8 s of a job's start, for a figure that only has to say
    it is slow. Its record has one time instead of ``repeat``. ``one_long_run=False`` keeps
    every repeat (a device whose first runs are slower than the kernel: an emulated one).

    A kernel whose single runs are all at least ``config.screen_sec`` (its task's best so far
    times ``config.screen``) plus :data:`SINGLE_RUN_SLACK_SEC` is timed by them too: it is no
    new best, and the cost model learns as much from them. Returns the times and whether
    they were screened so.
    """
    number, repeat, min_ms = config.number, config.repeat, config.min_repeat_ms
    if config.cache_flush:  # the caches are flushed before each repeat: one run a repeat
        number, min_ms = 1, 0

    def run(number: int, repeat: int, min_ms: int) -> tuple[float, ...]:
        return tuple(float(s) for s in evaluator_of(number, repeat, min_ms)(*args).results)

    if min_ms <= 0:
        return run(number, repeat, 0), False
    single = run(1, 1, 0)
    if one_long_run and number == 1 and single[0] >= repeat * min_ms / 1000:
        return single, False
    if repeat > 1:
        single += run(1, repeat - 1, 0)
    fastest = min(single)
    if not math.isfinite(fastest) or fastest <= 0:  # below the timer's resolution: TVM's way
        return run(number, repeat, min_ms), False
    if fastest >= min_ms / 1000 and number == 1:
        return single, False
    screen = config.screen_sec
    if one_long_run and screen is not None and fastest >= screen + SINGLE_RUN_SLACK_SEC:
        return single, True
    number = max(number, math.ceil(min_ms / 1000 / fastest))
    return run(number, repeat, max(1, int(FLOOR * min_ms))), False


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
            evaluator_of = functools.partial(
                rt_mod.time_evaluator,
                rt_mod.entry_name,
                dev,
                f_preproc="cache_flush_cpu_non_first_arg" if config.cache_flush else "",
            )
            dev.sync()
            secs, screened = timed_secs(evaluator_of, args, config)
            if config.cooldown_ms:
                time.sleep(config.cooldown_ms / 1000)
    except Exception as err:
        return _error(ErrorKind.RUN_ERROR, error_summary(err, limit=500), device, worker)
    return _checked(secs, device, worker, screened)


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
            evaluator_of = functools.partial(vm.time_evaluator, "main", dev)
            dev.sync()
            secs, _ = timed_secs(evaluator_of, args, config)
    except Exception as err:
        return _error(ErrorKind.RUN_ERROR, error_summary(err, limit=500), device, worker)
    return _checked(secs, device, worker)


def _error(kind: ErrorKind, detail: str, device: str, worker: str) -> RunResult:
    return RunResult(error_kind=kind, error_msg=kind.message(detail), device=device, worker=worker)


def _checked(
    secs: tuple[float, ...], device: str, worker: str, screened: bool = False
) -> RunResult:
    """Run times as a result; missing, non-finite or non-positive ones are invalid."""
    if not secs or any(not math.isfinite(s) or s <= 0 for s in secs):
        return _error(ErrorKind.INVALID_RESULT, f"bad run times {secs}", device, worker)
    return RunResult(run_secs=secs, device=device, worker=worker, screened=screened)
