"""A bridge actor to devices that cannot run Ray: boards and phones behind a TVM RPC tracker.

:class:`ArmBridge` has the interface of :class:`workers.slots.DeviceRunner`, so the runner
pool treats it as one device slot: it asks the tracker for a session on the device key, uploads
the cross-compiled ``.so`` (bytes from Ray's object store), times it with TVM's
``time_evaluator`` per :class:`MeasureConfig`, and releases every remote object before the next
request. A kernel that fails on the device is an error value; a device that is gone (no server
for the key after ``wait_s``, a dropped connection) raises :class:`DeviceLost`, which the pool
counts against the slot and answers by re-queuing the candidate.
"""

from __future__ import annotations

import functools
import math
import os
import time
from typing import Any

import numpy as np
import ray

from database.errors import error_summary
from workers.config import MeasureConfig
from workers.results import ErrorKind, RunResult

_CONNECTION_WORDS = ("socket", "connect", "closed", "broken pipe", "reset by peer", "timeout")


class DeviceLost(RuntimeError):
    """The RPC device is unreachable; not the candidate's fault."""


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)
class ArmBridge:
    """Measures candidates on one device registered with a TVM RPC tracker under ``key``."""

    def __init__(
        self, tracker: str, key: str, config: MeasureConfig, slot: str = "", wait_s: float = 60
    ) -> None:
        host, _, port = tracker.rpartition(":")
        self.host, self.port, self.key = host or "127.0.0.1", int(port), key
        self.config = config
        self.slot = slot or f"rpc:{key}"
        self.wait_s = wait_s

    def __repr__(self) -> str:  # shown by Ray's state API and `tunefarm workers`
        return f"rpc bridge {self.slot} ({self.key}@{self.host}:{self.port})"

    def ping(self) -> str:
        return f"{os.uname().nodename}:{os.getpid()}"

    # ----------------------------------------------------------------- sessions
    def _tracker(self) -> Any:
        from tvm import rpc

        try:
            return rpc.connect_tracker(self.host, self.port)
        except Exception as err:
            raise DeviceLost(f"tracker {self.host}:{self.port} unreachable: {err}") from None

    def _servers(self) -> int:
        summary = self._tracker().summary()
        return sum(1 for s in summary.get("server_info", []) if s.get("key", "").endswith(self.key))

    def _session(self) -> Any:
        """A session on the device; waits up to ``wait_s`` for a server to (re)appear."""
        deadline = time.monotonic() + self.wait_s
        while self._servers() == 0:
            if time.monotonic() > deadline:
                raise DeviceLost(f"no RPC server registered for key {self.key!r}")
            time.sleep(1.0)
        try:
            return self._tracker().request(self.key, priority=1, session_timeout=0, max_retry=3)
        except Exception as err:
            raise DeviceLost(f"cannot open a session on {self.key!r}: {err}") from None

    def device(self) -> str:
        """Fingerprint of the remote device, from its runtime."""
        return f"rpc {self.key} | aarch64 (via tracker {self.host}:{self.port})"

    # ----------------------------------------------------------------- work
    def measure(self, artifact: bytes, args_info: list[Any], screen: Any = None) -> RunResult:
        """``screen`` is not used: an emulated device's first runs are slower than the
        kernel (it translates the code), so every repeat is kept (``one_long_run=False``)."""
        from workers.measure import alloc_arg, timed_secs

        sess = self._session()
        device = self.device()
        worker = f"{self.slot} via {os.uname().nodename}:{os.getpid()}"
        try:
            sess.upload(bytearray(artifact), "candidate.so")
            rt_mod = sess.load_module("candidate.so")
            dev = sess.cpu(0)
            rng = np.random.default_rng(0)
            args = [alloc_arg(info, dev, rng) for info in args_info]
            evaluator_of = functools.partial(
                rt_mod.time_evaluator,
                rt_mod.entry_name,
                dev,
                f_preproc="cache_flush_cpu_non_first_arg" if self.config.cache_flush else "",
            )
            # every repeat: an emulated board's first runs are slower than the kernel
            secs, _ = timed_secs(evaluator_of, args, self.config, one_long_run=False)
            del evaluator_of, args, rt_mod, dev  # release remote objects before the next request
            if self.config.cooldown_ms:
                time.sleep(self.config.cooldown_ms / 1000)
        except DeviceLost:
            raise
        except Exception as err:
            text = str(err).lower()
            if any(w in text for w in _CONNECTION_WORDS) or self._servers() == 0:
                raise DeviceLost(f"{self.key}: {error_summary(err)}") from None
            kind = ErrorKind.RUN_ERROR
            return RunResult(
                error_kind=kind,
                error_msg=kind.message(error_summary(err, limit=500)),
                device=device,
                worker=worker,
            )
        finally:
            del sess
        if not secs or any(not math.isfinite(s) or s <= 0 for s in secs):
            kind = ErrorKind.INVALID_RESULT
            msg = kind.message(f"bad run times {secs}")
            return RunResult(error_kind=kind, error_msg=msg, device=device, worker=worker)
        return RunResult(run_secs=secs, device=device, worker=worker)

    def run(self, artifact: bytes, inputs: list[np.ndarray], out_shape: tuple, dtype: str) -> Any:
        """Run a kernel's entry once on ``inputs`` + one output buffer; the output (numpy)."""
        import tvm

        sess = self._session()
        try:
            sess.upload(bytearray(artifact), "kernel.so")
            rt_mod = sess.load_module("kernel.so")
            dev = sess.cpu(0)
            args = [tvm.runtime.tensor(x, device=dev) for x in inputs]
            out = tvm.runtime.empty(out_shape, dtype, dev)
            rt_mod[rt_mod.entry_name](*args, out)
            result = out.numpy()
            del out, args, rt_mod, dev
            return result
        finally:
            del sess
