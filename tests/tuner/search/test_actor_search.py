"""The task-parallel search inside real tune jobs on a local Ray: actors, restarts, splits."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import ray

from database import Storage, TuneFarmDatabase
from tests.conftest import TINY
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.progress import TaskState
from workers.config import MeasureConfig

pytestmark = [pytest.mark.slow, pytest.mark.ray]


class KillSearchActors:
    """A job's progress callback that kills every search actor at its ``at``-th advance: the
    first counts the records before the search (no round searched yet), the second follows
    the first round."""

    def __init__(self, at: int) -> None:
        self.killed: list[str] = []
        self.at, self.advances = at, 0

    def start(self, tasks: Sequence[TaskState], total: int) -> None:
        pass

    def advance(self, n: int) -> None:
        self.advances += 1
        if self.killed or self.advances != self.at:
            return
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"] if isinstance(entry, dict) else entry
            if name.startswith("tunefarm-search-"):
                ns = entry.get("namespace") if isinstance(entry, dict) else None
                ray.kill(ray.get_actor(name, namespace=ns))
                self.killed.append(name)

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("at", [1, 2], ids=["before-its-first-round", "after-a-round"])
def test_a_search_actor_that_dies_is_rebuilt_from_the_database(
    sqlite_url, llvm_target, at: int
) -> None:
    """Nothing in flight when it dies (before its first round) or a round generating: the
    task is rebuilt and searched on to its budget."""
    model = load_model(TINY)
    config = TuneConfig(
        trials=12,
        trials_per_iter=4,
        seed=2,
        search="ray",
        measure=MeasureConfig(min_repeat_ms=5, repeat=1),
    )
    killer = KillSearchActors(at)
    summary = tune(model.mod, llvm_target, Storage(sqlite_url), config, progress=killer)
    assert killer.killed  # the fault was injected
    assert summary.search["mode"] == "ray" and summary.search["restarts"] == 1
    assert "rebuilt from the database" in summary.search["events"][0]
    (task,) = summary.tasks
    assert task.trials == 12  # nothing lost: the whole budget was spent, nothing twice
    assert summary.trials_measured == 12
    # a best and the default's time, both timed; which is lower is the machine's load's
    # say (a re-timing at a busy moment can put the best's median above the default's)
    assert task.best_sec is not None and task.best_sec > 0
    assert task.baseline_sec is not None and task.baseline_sec > 0


def test_the_driver_search_keeps_metaschedules_loop(sqlite_url, llvm_target) -> None:
    model = load_model(TINY)
    config = TuneConfig(
        trials=4, trials_per_iter=4, seed=1, search="driver", measure=MeasureConfig(repeat=1)
    )
    summary = tune(model.mod, llvm_target, Storage(sqlite_url), config)
    assert summary.search["mode"] == "driver" and summary.tasks[0].trials == 4
    # no actors; MetaSchedule's loop confirms a new best too (its first round's best, at least),
    # and the job's end re-times the best schedules as in the other modes
    assert set(summary.search) == {
        "mode", "per_round", "population", "cost_model", "confirmed", "retime",
    }  # fmt: skip
    assert (
        TuneFarmDatabase(Storage(sqlite_url)).count_records(
            summary_mod(model, llvm_target), llvm_target
        )
        == 4
    )


def summary_mod(model, target):
    from tuner.pipeline import extract_tasks, prepare

    return extract_tasks(prepare(model.mod, target), target)[0].mod
