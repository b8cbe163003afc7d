"""What the search records its measured rounds through: the job implements it
(:class:`tuner.job.recorder.JobRecorder`); the search knows only this interface."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

# candidate i's (trace, arguments) as a record stores them
AsJson = Callable[[int], tuple[Any, Any]]


class Recorder(Protocol):
    """Records one measured round of a task and answers what the search asks between rounds."""

    @property
    def resumed(self) -> int:
        """Candidates measured before (in the database already): no trials."""
        ...

    def best_sec(self, task: int) -> float | None:
        """Task ``task``'s best mean latency so far (None: nothing ran yet)."""
        ...

    def record(
        self,
        task_id: int,
        as_json: AsJson,
        builder_results: Sequence[Any],
        runner_results: Sequence[Any],
    ) -> None:
        """Record one measured round of ``task_id``; ``as_json(i)`` is asked only for the
        candidates that become records."""
        ...


__all__ = ["AsJson", "Recorder"]
