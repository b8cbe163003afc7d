"""What one job knows about its candidates between build, run and record.

MetaSchedule only passes an ``artifact_path`` string from builder to runner; here it is a key
into a :class:`Ledger` that holds the object reference and the full results (error kinds,
device, worker) for the job's recorder. :class:`TrialBudget` is the job's hard cap on trials.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
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


class RoundPace:
    """A timed job's pace, for a time budget that is a hard cap: how long a candidate takes
    from the start of its round's builds to the round's record, and how long the search of a
    round takes; from those, how many of a round's candidates still fit before ``ends_at``
    (a :func:`time.perf_counter` value) and whether another round does. Until a round has
    been timed, everything fits (thread-safe)."""

    def __init__(self, ends_at: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.ends_at = ends_at
        self._clock = clock
        self._lock = threading.Lock()
        self._sent_at: float | None = None
        self._sent = 0
        self._recorded_at: float | None = None
        self.candidate_sec: float | None = None  # the last timed round's, per candidate built
        self.search_sec: float | None = None  # from the last record to the next round's builds
        self.cut = 0  # candidates not built because they would have ended past ``ends_at``

    def sending(self, n: int) -> int:
        """The builder is about to build ``n`` new candidates: how many of them (the first
        ones) to build. The rest would be measured after the deadline."""
        now = self._clock()
        with self._lock:
            if self._recorded_at is not None:
                self.search_sec = now - self._recorded_at
                self._recorded_at = None
            fit = n
            if self.candidate_sec is not None and self.candidate_sec > 0:
                fit = max(0, min(n, int((self.ends_at - now) / self.candidate_sec)))
            self.cut += n - fit
            self._sent_at, self._sent = now, fit
            return fit

    def recorded(self) -> None:
        """A round's measurements are recorded."""
        now = self._clock()
        with self._lock:
            if self._sent_at is not None and self._sent > 0:
                self.candidate_sec = (now - self._sent_at) / self._sent
            self._sent_at, self._sent = None, 0
            self._recorded_at = now

    def left(self) -> float:
        """Seconds until ``ends_at`` (negative past it)."""
        return self.ends_at - self._clock()

    def another_round(self) -> bool:
        """Whether the time left holds another round's search and one of its candidates."""
        with self._lock:
            if self.candidate_sec is None or self.search_sec is None:
                return self.ends_at > self._clock()
            return self.ends_at - self._clock() > self.search_sec + self.candidate_sec


class Interrupted(Exception):
    """The job was asked to stop (Ctrl-C, or its time budget is up): raised by the builder at
    its next batch."""


OVER_BUDGET = "not built: the job's trial budget is spent"
OVER_TIME = "not built: it would be measured after the job's time budget"
OVER_TIME_BUILDING = "not built: the job's time budget ran out while it compiled"
STOPPED = "not built: the job was stopped while it compiled"


def run_result_of_row(row: Any) -> RunResult:
    """The run result of a candidate measured in an earlier job (its database row)."""
    if row.mean_sec is None:
        kind = ErrorKind(row.error_kind) if row.error_kind else ErrorKind.RUN_ERROR
        return RunResult(
            error_kind=kind, error_msg=kind.message(row.error_msg or "measured before")
        )
    return RunResult(run_secs=tuple(json.loads(row.run_secs_json)), device=row.device)
