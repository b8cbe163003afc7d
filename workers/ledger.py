"""What one job knows about its candidates between build, run and record.

MetaSchedule only passes an ``artifact_path`` string from builder to runner; here it is a key
into a :class:`Ledger` that holds the object reference and the full results (error kinds,
device, worker) for the job's recorder. :class:`TrialBudget` is the job's hard cap on trials.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from workers.results import BuildResult, ErrorKind, RunResult


@dataclass
class Entry:
    """Everything known about one candidate between build, run and record."""

    candidate_hash: str
    build: BuildResult | None = None
    run: RunResult | None = None
    artifact: Any = None  # ray.ObjectRef of the .so bytes
    cached: bool = False  # measured in an earlier job: nothing was built or run
    dropped: bool = False  # past the job's trial budget: not built, run or recorded
    rebuild: Any = None  # () -> a new artifact ref, when the first copy is lost with its node


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


class TrialBudget:
    """How many more candidates a job may build, run and record (thread-safe).

    The builder takes one slot per candidate it sends to a build (candidates measured in an
    earlier job cost nothing); a candidate that finds no slot is dropped, never built.
    """

    def __init__(self, left: int) -> None:
        self._left = max(0, left)
        self._lock = threading.Lock()
        self.closed_by: str | None = None  # why close() ended it early: "user", "time"

    @property
    def left(self) -> int:
        with self._lock:
            return self._left

    def take(self) -> bool:
        """Take one slot; False when the budget is spent."""
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True

    def close(self, why: str = "user") -> int:
        """Spend what is left (a stopped job builds nothing more); returns the slots dropped.
        ``why`` is kept as :attr:`closed_by` (the first reason given wins)."""
        with self._lock:
            left, self._left = self._left, 0
            if self.closed_by is None:
                self.closed_by = why
            return left


class Interrupted(Exception):
    """The job was asked to stop (Ctrl-C, or its time budget is up): raised by the builder at
    its next batch."""


OVER_BUDGET = "not built: the job's trial budget is spent"


def run_result_of_row(row: Any) -> RunResult:
    """The run result of a candidate measured in an earlier job (its database row)."""
    if row.mean_sec is None:
        kind = ErrorKind(row.error_kind) if row.error_kind else ErrorKind.RUN_ERROR
        return RunResult(
            error_kind=kind, error_msg=kind.message(row.error_msg or "measured before")
        )
    return RunResult(run_secs=tuple(json.loads(row.run_secs_json)), device=row.device)
