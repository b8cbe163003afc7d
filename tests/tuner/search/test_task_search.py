"""One task's search state driven round by round, the scheduler, and the cost model's state."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import tvm

from tests.conftest import matmul_mod
from tuner.cost_model.model import TunefarmModel
from tuner.cost_model.ranker import RankerParams, fit_ranker, to_bytes
from tuner.search.scheduler import TaskProgress, next_task
from tuner.search.task import ModelSpec, TaskSearch, TaskSpec


def _spec(records: list | None = None, per_round: int = 4) -> TaskSpec:
    return TaskSpec(
        task_id=0,
        name="mm",
        mod_json=tvm.ir.save_json(matmul_mod(32, 32, 32)),
        records=records or [],
        max_trials=64,
        per_round=per_round,
        population=32,
        seed=3,
    )


def test_rounds_are_plain_data_and_a_second_round_needs_no_results_first(llvm_target) -> None:
    search = TaskSearch(_spec(), llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    first = search.generate()
    second = search.generate()  # pipelined: the first round is not measured yet
    assert first and second
    hashes = [c.candidate_hash for c in first + second]
    assert len(set(hashes)) == len(hashes)  # never the same candidate twice
    cand = first[0]
    json.dumps([cand.trace_json, cand.args_info_json])  # what a record stores
    from database import shash_of

    assert shash_of(tvm.ir.load_json(cand.mod_json)) == cand.candidate_hash
    with pytest.raises(ValueError, match="results for a round of"):
        search.notify([(None, "boom")])
    search.notify([([1e-3 * (i + 1)], None) for i in range(len(first))])
    search.notify([(None, "build error")] * len(second))
    top = search.db.get_top_k(search.workload, 100)
    assert [float(r.run_secs[0]) for r in top] == sorted(1e-3 * (i + 1) for i in range(len(first)))


def test_a_state_rebuilt_from_records_starts_from_them(llvm_target) -> None:
    search = TaskSearch(_spec(), llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    round_ = search.generate()
    search.notify([([2e-3], None)] + [(None, "x")] * (len(round_) - 1))
    (record,) = search.db.get_top_k(search.workload, 10)
    again = TaskSearch(
        _spec(records=[json.loads(json.dumps(record.as_json(), default=float))]),
        llvm_target,
        ModelSpec("random", seed=0).create(1),
        threads=1,
    )
    (seeded,) = again.db.get_top_k(again.workload, 10)
    assert float(seeded.run_secs[0]) == 2e-3
    assert again.generate()


def test_the_scheduler_gives_every_task_a_round_then_the_most_promising() -> None:
    progress = [TaskProgress(weight=1, want=8, baseline_sec=1e-3) for _ in range(3)]
    assert next_task(progress, {0, 1, 2}) == 0
    progress[0].rounds = 1
    assert next_task(progress, {0, 1, 2}) == 1
    assert next_task(progress, {0}) == 0  # the one its actor hosts
    for p, best in zip(progress, (1e-3, 5e-3, 2e-3), strict=True):
        p.rounds = 1
        p.measured(best)
    assert next_task(progress, {0, 1, 2}) == 1  # the largest weighted latency
    progress[1].sent = 8  # its share is spent
    assert next_task(progress, {0, 1, 2}) == 2
    progress[2].exhausted = True
    assert next_task(progress, {1, 2}) is None
    fresh = TaskProgress(weight=1, want=4)
    fresh.measured(None)  # nothing valid yet
    assert math.isinf(fresh.best[-1]) and math.isinf(fresh.priority())
    # tasks without a round: the largest weighted untuned latency first, unknown before any
    untuned = [
        TaskProgress(weight=1, want=8, baseline_sec=1e-3),
        TaskProgress(weight=4, want=8, baseline_sec=1e-3),
        TaskProgress(weight=1, want=8, baseline_sec=2e-3),
        TaskProgress(weight=1, want=8),
    ]
    order = []
    while (task := next_task(untuned, {0, 1, 2, 3} - set(order))) is not None:
        order.append(task)
        if len(order) == 4:
            break
    assert order == [3, 1, 2, 0]
    # a round sent (building, not measured yet) counts: every task's first round comes first
    pair = [TaskProgress(weight=1, want=8, baseline_sec=b) for b in (1e-3, 4e-1)]
    assert next_task(pair, {0, 1}) == 1
    pair[1].sent = 4  # its first round (the siblings) is in the builders
    assert next_task(pair, {0, 1}) == 0


def test_candidates_measured_before_give_their_place_in_the_share_back() -> None:
    from tuner.search.scheduler import MAX_STALE_ROUNDS

    task = TaskProgress(weight=1, want=8)
    task.sent = 8  # a round of 8 sent, 3 of them measured before: 3 more may be sent
    task.refund(3, 8)
    assert task.sent == 5 and task.open and task.stale == 0
    task.refund(0, 5)
    assert task.sent == 5 and task.open
    for i in range(MAX_STALE_ROUNDS):  # rounds of nothing new: then it counts as exhausted
        assert task.open
        task.sent += 2
        task.refund(2, 2)
        assert task.sent == 5 and task.stale == i + 1
    assert task.exhausted and not task.open


def test_the_cost_model_travels_as_plain_data() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype("float32")
    secs = rng.uniform(1e-4, 1e-3, 64)
    group = np.repeat(np.arange(4), 16)
    params = RankerParams(rounds=5, online_rounds=3)
    base = fit_ranker(x, secs, group, params)
    model = TunefarmModel(base=base, params=params, weights={"w": 2.0}, seed=0)
    model.add_local(x[:20], secs[:20], ["w"] * 20)
    model.refit()
    copy = TunefarmModel.from_state(model.state(nthread=1), seed=5)
    assert copy.params.nthread == 1 and copy.weights == {"w": 2.0}
    assert to_bytes(copy.ranker) == to_bytes(model.ranker)
    assert to_bytes(copy.base) == to_bytes(model.base)
    assert copy.n_local == 20
    np.testing.assert_array_equal(np.stack(copy._x), np.stack(model._x))


def test_the_tasks_of_an_actor_share_one_cost_model(llvm_target) -> None:
    from tuner.search.actor import SearchActor
    from tuner.search.task import TaskSpec

    actor = SearchActor(
        __import__("database").TargetKey.of(llvm_target).json, ModelSpec("tunefarm", seed=0), 1
    )
    for task_id, n in ((0, 32), (1, 48)):
        actor.add(
            TaskSpec(task_id, f"mm{n}", tvm.ir.save_json(matmul_mod(n, n, n)), [], 64, 4, 32, 1)
        )
    round_ = actor.generate(0)
    rows = actor.notify(0, [([1e-3 * (i + 1)], None) for i in range(len(round_))])
    assert rows is not None and len(rows[1]) == len(round_)
    # one model for both tasks: the sibling ranks with what task 0 measured, learned once
    assert actor.tasks[1].model is actor.tasks[0].model is actor.model
    assert actor.model.n_local == len(round_)
    actor.absorb(rows)  # another actor's rows: into the model once
    assert actor.model.n_local == 2 * len(round_)
    assert set(actor.features()) == {
        (k, c.candidate_hash) for k, c in zip(rows[2], round_, strict=True)
    }


def test_seeds_are_the_first_round_post_processed_distinct_and_counted(llvm_target) -> None:
    """A task given other buckets' schedules (refitted to its shape) measures them first: one
    round of at most ``per_round``, post-processed as the search's own candidates, duplicates
    and seeds its kernel cannot replay dropped; they count against its trials."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from database.transfer import adapt_trace

    donor = TaskSearch(_spec(), llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    donor.generate()
    traces = [c.sch.trace for c in donor._pending[0]]
    at16 = matmul_mod(16, 32, 32)
    refitted = [adapt_trace(t, at16) for t in traces]
    assert all(t is not None for t in refitted)

    def as_seed(trace: Any) -> Any:
        rec = TuningRecord(trace, Workload(at16), None, llvm_target, None).as_json()
        return json.loads(json.dumps(rec, default=float))

    other = matmul_mod(16, 32, 32, block="D")  # another kernel: its trace does not replay here
    foreign = TaskSearch(
        TaskSpec(1, "o", tvm.ir.save_json(other), [], 8, 4, 16, 0),
        llvm_target,
        ModelSpec("random", seed=0).create(1),
        threads=1,
    )
    foreign.generate()
    bad = TuningRecord(foreign._pending[0][0].sch.trace, Workload(other), None, llvm_target, None)
    seeds = (as_seed(refitted[0]), as_seed(refitted[0]), bad.as_json(), *map(as_seed, refitted[1:]))
    spec = TaskSpec(2, "mm16", tvm.ir.save_json(at16), [], 8, 3, 16, 0, seeds=seeds)
    search = TaskSearch(spec, llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    first = search.generate()
    assert first is not None and len(first) == 3  # per_round, of the 4 distinct that replay
    assert len({c.candidate_hash for c in first}) == 3
    given = {json.dumps(t.as_json()[1], default=int) for t in refitted}
    for cand in first:  # the refitted schedules' own decisions, post-processed
        assert json.dumps(cand.trace_json[1], default=int) in given
        assert "meta_schedule.parallel" not in str(tvm.ir.load_json(cand.mod_json))
    search.notify([([1e-3], None)] * 3)
    total = 3
    while (more := search.generate()) is not None:  # the search goes on, to its max_trials
        total += len(more)
        search.notify([([2e-3], None)] * len(more))
    assert total == 8


def test_seeds_sent_mid_job_lead_the_next_round_and_the_search_fills_it(llvm_target) -> None:
    """The bucket exchange: a schedule sent to a running search (another bucket's new best,
    refitted) is the first candidate of its next round, the search's own fill the round, and
    one the search already generated is never sent again."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from database.transfer import adapt_trace

    donor = TaskSearch(_spec(), llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    donor.generate()
    at16 = matmul_mod(16, 32, 32)
    refitted = adapt_trace(donor._pending[0][0].sch.trace, at16)
    assert refitted is not None
    seed = json.loads(
        json.dumps(
            TuningRecord(refitted, Workload(at16), None, llvm_target, None).as_json(), default=float
        )
    )
    spec = TaskSpec(2, "mm16", tvm.ir.save_json(at16), [], 64, 4, 16, 0)
    search = TaskSearch(spec, llvm_target, ModelSpec("random", seed=0).create(1), threads=1)
    first = search.generate()
    assert first is not None and len(first) == 4
    search.notify([([1e-3], None)] * 4)
    assert search.seed([seed, seed]) == 1  # duplicates dropped
    second = search.generate()
    assert second is not None and len(second) == 4
    assert json.dumps(second[0].trace_json[1], default=int) == json.dumps(
        refitted.as_json()[1], default=int
    )
    assert len({c.candidate_hash for c in first + second}) == 8
    search.notify([([2e-3], None)] * 4)
    assert search.seed([seed]) == 0  # generated already: not measured twice
    gen = search._sent.copy()
    third = search.generate()
    assert third is not None and not gen & {c.candidate_hash for c in third}
