"""Results of workers as values: every failure is an error kind plus a short message."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass


class ErrorKind(str, enum.Enum):
    """Why a candidate produced no valid measurement."""

    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUN_ERROR = "run_error"
    RUN_TIMEOUT = "run_timeout"
    WORKER_DIED = "worker_died"
    INVALID_RESULT = "invalid_result"

    def message(self, detail: str) -> str:
        """The MetaSchedule-facing error string: ``kind: first line of detail``."""
        first = detail.strip().splitlines()[0] if detail.strip() else ""
        return f"{self.value}: {first[:500]}"

    @staticmethod
    def parse(error_msg: str | None) -> ErrorKind | None:
        """Recover the kind from a message made by :meth:`message` (unknown → RUN_ERROR)."""
        if not error_msg:
            return None
        head = error_msg.split(":", 1)[0].strip()
        try:
            return ErrorKind(head)
        except ValueError:
            return ErrorKind.RUN_ERROR


BUILDER_CRASHED = "builder crashed"  # how a build error's message says the compiler died


class EventLog:
    """What a pool did (quarantines, blames, losses): kept for ``workers``/tests and logged."""

    def __init__(self, logger: logging.Logger, level: int = logging.INFO) -> None:
        self.events: list[str] = []
        self._logger = logger
        self._level = level

    def note(self, event: str, level: int | None = None) -> None:
        self.events.append(event)
        self._logger.log(self._level if level is None else level, "%s", event)


@dataclass(frozen=True)
class BuildResult:
    """What a builder reports for one candidate (the artifact travels separately)."""

    error_kind: ErrorKind | None = None
    error_msg: str | None = None
    build_sec: float = 0.0
    worker: str | None = None
    node: str | None = None  # the Ray node that built it (None when unknown)
    crashed: bool = False  # the compiler process died (a segfault, not a compile error)
    slow: bool = False  # cut at the job's slow-compile limit (workers.builder), not hung

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def node_suspect(self) -> bool:
        """A failure that may be the build node's fault, not the candidate's: the compiler
        crashed or hung (a plain compile error, or a compile cut as too slow, is the
        candidate's own)."""
        return (self.error_kind is ErrorKind.BUILD_TIMEOUT and not self.slow) or self.crashed


@dataclass(frozen=True)
class RunResult:
    """What a runner reports for one candidate."""

    run_secs: tuple[float, ...] | None = None
    error_kind: ErrorKind | None = None
    error_msg: str | None = None
    device: str | None = None
    worker: str | None = None
    # seconds the device's actor spent on it (load, warm-up, timed runs, checks): the
    # device's busy time, whatever ``run_secs`` reports of the kernel alone
    device_sec: float | None = None
    # timed by its single runs only: slower than its screen (MeasureConfig.screen)
    screened: bool = False

    @property
    def ok(self) -> bool:
        return self.error_kind is None
