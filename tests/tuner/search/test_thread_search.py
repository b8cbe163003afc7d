"""The pipelined search with its task states in a thread of the driver (``--search thread``)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from database import Storage, TargetKey, TuneFarmDatabase
from tests.conftest import TINY
from tests.tuner.search.test_actor_search import summary_mod
from tests.tuner.search.test_task_search import _spec
from tuner.errors import TuneFarmError
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.search.actor import LocalTaskError, ThreadSearchActor
from tuner.search.driver import SearchPlan
from tuner.search.task import ModelSpec
from workers.config import MeasureConfig


def _search_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tunefarm-search")]


def test_calls_run_in_order_in_one_thread_and_errors_come_back_as_values(llvm_target) -> None:
    actor = ThreadSearchActor(TargetKey.of(llvm_target).json, ModelSpec("random", seed=0), 1)
    try:
        added = actor.add.remote(_spec())
        first = actor.generate.remote(0)  # queued behind add, as on a Ray actor
        assert added.result(timeout=120) == 0
        cands = first.result(timeout=120)
        assert cands and len(cands) == 4 and len({c.candidate_hash for c in cands}) == 4
        told = actor.notify.remote(0, [([1e-3], None)] * 4)
        assert told.result(timeout=120) is None  # a stock model returns no rows to share
        broken = actor.add.remote(replace(_spec(), task_id=1, mod_json="not a module"))
        with pytest.raises(LocalTaskError) as err:
            broken.result(timeout=120)
        assert "\n" not in str(err.value) and err.value.__cause__ is not None
        stats = actor.stats.remote().result(timeout=60)  # still serving, Ray never started
        assert stats == {"node": None, "busy_sec": stats["busy_sec"]} and stats["busy_sec"] > 0
        with pytest.raises(AttributeError):
            actor.no_such_call  # noqa: B018
    finally:
        actor.stop()
    assert not _search_threads()  # stopped, not left running


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("compile_aware", [False, True], ids=["model-order", "compile-aware"])
def test_a_thread_search_job_searches_beside_its_builds_and_stops_its_thread(
    sqlite_url, llvm_target, compile_aware: bool
) -> None:
    """Also with the compile-aware pick: twice a round asked of the search, the budget kept."""
    model = load_model(TINY)
    config = TuneConfig(
        trials=12,
        trials_per_iter=4,
        seed=3,
        search="thread",
        measure=MeasureConfig(min_repeat_ms=5, repeat=1),
        compile_aware=compile_aware,
    )
    summary = tune(model.mod, llvm_target, Storage(sqlite_url), config)
    search = summary.search
    assert search["mode"] == "thread" and search["actors"] == 1 and search["restarts"] == 0
    assert search["rounds"] == 3 and search["actor_busy_sec"] > 0
    (task,) = summary.tasks
    assert task.trials == 12 and summary.trials_measured == 12  # the budget, exactly
    # a best and the default's time, both timed; which is lower is the machine's load's
    # say (a re-timing at a busy moment can put the best's median above the default's)
    assert task.best_sec is not None and task.best_sec > 0
    assert task.baseline_sec is not None and task.baseline_sec > 0
    db = TuneFarmDatabase(Storage(sqlite_url))
    assert db.count_records(summary_mod(model, llvm_target), llvm_target) == 12
    assert search["prior_tasks"] == 0  # nothing built before
    if compile_aware:  # a second job's search starts from the first one's build times
        # (--trials counts the records already there: 4 more)
        again = tune(model.mod, llvm_target, Storage(sqlite_url), replace(config, trials=16))
        assert again.search["prior_tasks"] == 1 and again.trials_measured == 4
    assert not _search_threads()


@pytest.mark.slow
@pytest.mark.ray
def test_a_planned_share_is_filled_with_new_records_past_candidates_measured_before(
    sqlite_url, llvm_target
) -> None:
    """A second job on the same database, with a planned share: candidates its search
    proposes again (measured by the first job) are no trials, so the share is filled with
    new records (a planned stage ended 3 of 32 trials short)."""
    model = load_model(TINY)
    measure = MeasureConfig(min_repeat_ms=5, repeat=1)
    first = TuneConfig(trials=8, trials_per_iter=4, seed=3, search="thread", measure=measure)
    (task,) = tune(model.mod, llvm_target, Storage(sqlite_url), first).tasks
    second = replace(first, trials=24, task_trials=((task.name, 24),))
    summary = tune(model.mod, llvm_target, Storage(sqlite_url), second)
    db = TuneFarmDatabase(Storage(sqlite_url))
    assert db.count_records(summary_mod(model, llvm_target), llvm_target) == 24
    assert summary.trials_measured == 16


def test_search_hosts_are_checked() -> None:
    with pytest.raises(TuneFarmError, match="unknown search host 'gpu'; valid: ray, thread"):
        SearchPlan(per_round=4, population=16, host="gpu")
    with pytest.raises(
        TuneFarmError, match="unknown search mode 'gpu'; valid: auto, ray, thread, driver"
    ):
        TuneConfig(trials=4, search="gpu")
