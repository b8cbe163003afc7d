"""A killable child process that runs one function call at a time, with a timeout.

A builder must survive a compiler that hangs or crashes (LLVM asserts abort the process).
Starting a fresh Python per build would cost an ``import tvm`` each time (seconds), so each
worker process keeps one long-lived child and sends it calls over a pipe; a call that exceeds
its timeout kills the child's process group, a call that kills the child is reported, and the
next call starts a new child. Failures are values (:class:`SandboxFailure`), never exceptions.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

POLL_SLICE_S = 0.2  # how late an interrupt of a waiting call is seen


@dataclass(frozen=True)
class SandboxFailure:
    """Why a call produced no result: ``timeout``, ``crashed`` or ``error``."""

    reason: str
    detail: str

    @property
    def timed_out(self) -> bool:
        return self.reason == "timeout"


def resolve(path: str) -> Any:
    """``"package.module:function"`` → the function."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"expected 'module:function', got {path!r}")
    return getattr(importlib.import_module(module), name)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name if code < 0 else f"exit code {code}"
    except ValueError:
        return f"signal {-code}"


class Sandbox:
    """One child Python process; :meth:`call` runs ``module:function(*args)`` in it."""

    def __init__(self, preload: tuple[str, ...] = ("tvm",), startup_timeout_s: float = 300) -> None:
        self.preload = preload
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.started = 0  # children started so far
        self._lock = threading.Lock()

    def _start(self) -> None:
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        cmd = [sys.executable, "-m", "workers.sandbox", str(child_r), str(child_w)]
        cmd += list(self.preload)
        self.proc = subprocess.Popen(
            cmd,
            pass_fds=(child_r, child_w),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),  # compiler chatter must not reach the protocol pipe
            start_new_session=True,  # its own process group: killed as a whole
        )
        os.close(child_r)
        os.close(child_w)
        # one duplex pair of pipes: read from parent_r, write to parent_w
        self.conn = _PipePair(parent_r, parent_w)  # type: ignore[assignment]
        self.started += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> SandboxFailure | None:
        """Start the child (its imports) unless it runs; why it could not, or None."""
        with self._lock, self._killed_if_interrupted():
            return self._ensure_started()

    def _ensure_started(self) -> SandboxFailure | None:
        if self.alive():
            return None
        self.close()
        self._start()
        return self._wait_ready()

    def call(self, fn_path: str, args: tuple, timeout: float) -> Any:
        """The function's return value, or a :class:`SandboxFailure`.

        A caller interrupted meanwhile (a cancelled Ray task's ``KeyboardInterrupt``) kills the
        child before the exception goes on: its answer, or its start-up's, would otherwise
        be read as the next call's."""
        with self._lock, self._killed_if_interrupted():
            return self._call(fn_path, args, timeout)

    @contextlib.contextmanager
    def _killed_if_interrupted(self) -> Iterator[None]:
        """An exception out of a wait on the child (a cancel's ``KeyboardInterrupt``) kills
        the child: no half-started child, no late answer left in the pipe."""
        try:
            yield
        except BaseException:
            self.kill()
            raise

    def _call(self, fn_path: str, args: tuple, timeout: float) -> Any:
        failure = self._ensure_started()
        if failure is not None:
            return failure
        assert self.conn is not None and self.proc is not None
        try:
            self.conn.send((fn_path, args))
            if not self._poll(timeout):
                self.kill()
                return SandboxFailure("timeout", f"no result within {timeout:.0f} s")
            status, value = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self._reap()
            self.close()
            return SandboxFailure("crashed", f"child process died ({_signal_name(code)})")
        if status == "ok":
            return value
        return SandboxFailure("error", str(value))

    def _poll(self, timeout: float) -> bool:
        """Whether the child answered within ``timeout``, waiting in short slices: an
        exception sent to this thread (Ray's cancel of a running task) is raised between
        two of them, not after the whole timeout."""
        assert self.conn is not None
        ends = time.monotonic() + timeout
        while not self.conn.poll(max(0.0, min(POLL_SLICE_S, ends - time.monotonic()))):
            if time.monotonic() >= ends:
                return False
        return True

    def _wait_ready(self) -> SandboxFailure | None:
        """The child's start-up (imports) does not count against a call's timeout."""
        assert self.conn is not None
        try:
            if self._poll(self.startup_timeout_s) and self.conn.recv() == ("ready", None):
                return None
        except (EOFError, OSError):
            code = self._reap()
            self.close()
            return SandboxFailure("crashed", f"child process died at start ({_signal_name(code)})")
        self.kill()
        return SandboxFailure("timeout", f"child not ready within {self.startup_timeout_s:.0f} s")

    def _reap(self) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        """Kill the child and everything it started."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()


class _PipePair:
    """A duplex pickling channel over two one-way pipes."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.r = Connection(read_fd, writable=False)
        self.w = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self.w.send(obj)

    def recv(self) -> Any:
        return self.r.recv()

    def poll(self, timeout: float) -> bool:
        return self.r.poll(timeout)

    def close(self) -> None:
        self.r.close()
        self.w.close()


_SANDBOX: Sandbox | None = None


# what the shared sandbox imports before its first call: the compiler of the builds it runs
BUILD_PRELOAD = ("workers.build",)


def shared_sandbox() -> Sandbox:
    """The build sandbox of this process (one per Ray worker process, reused across tasks)."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox(preload=BUILD_PRELOAD)
    return _SANDBOX


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent (the Ray worker) dies, even mid-build."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(read_fd: int, write_fd: int, preload: list[str]) -> None:
    _die_with_parent()
    parent = os.getppid()
    conn = _PipePair(read_fd, write_fd)
    for name in preload:
        importlib.import_module(name)
    conn.send(("ready", None))
    while True:
        if os.getppid() != parent:
            return
        try:
            fn_path, args = conn.recv()
        except (EOFError, OSError):
            return
        start = time.perf_counter()
        try:
            reply = ("ok", resolve(fn_path)(*args))
        except BaseException as err:  # report everything, keep serving
            reply = (
                "error",
                f"{type(err).__name__}: {err} (after {time.perf_counter() - start:.1f} s)",
            )
        try:
            conn.send(reply)
        except Exception as err:  # an unpicklable result
            conn.send(("error", f"unpicklable result: {type(err).__name__}: {err}"))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
