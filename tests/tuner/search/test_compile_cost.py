"""Compile costs by unroll limit, and a round picked by the model's order per compile second."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tvm
from tvm.s_tir.meta_schedule.database import TuningRecord

from tests.conftest import matmul_mod
from tuner.search import task as task_module
from tuner.search.compile_cost import CompileCosts, pick, unroll_of, unroll_of_json
from tuner.search.driver import _plain
from tuner.search.task import ModelSpec, TaskSearch, TaskSpec


def _search(
    target: tvm.target.Target,
    per_round: int = 4,
    aware: bool = True,
    prior: tuple[tuple[int, float], ...] = (),
) -> TaskSearch:
    spec = TaskSpec(
        task_id=0,
        name="mm",
        mod_json=tvm.ir.save_json(matmul_mod(32, 32, 32)),
        records=[],
        max_trials=256,
        per_round=per_round,
        population=32,
        seed=5,
        compile_aware=aware,
        compile_prior=prior,
    )
    return TaskSearch(spec, target, ModelSpec("random", seed=0).create(1), threads=1)


def _pragmas(stmt: Any) -> list[int]:
    """The auto-unroll pragmas of a scheduled kernel's loops."""
    out = []
    ann = getattr(stmt, "annotations", None)
    if ann is not None and "pragma_auto_unroll_max_step" in ann:
        out.append(int(ann["pragma_auto_unroll_max_step"]))
    for name in ("block", "body", "init", "then_case", "else_case"):
        child = getattr(stmt, name, None)
        if child is not None:
            out += _pragmas(child)
    for child in getattr(stmt, "seq", None) or []:
        out += _pragmas(child)
    return out


def test_the_unroll_limit_is_the_value_the_trace_sampled(llvm_target) -> None:
    search = _search(llvm_target, per_round=8)
    seen = set()
    for _ in range(3):
        for cand in search.ctx.generate_measure_candidates():
            limit = unroll_of(cand.sch.trace)
            assert limit in (0, 16, 64, 512)
            # the scheduled module carries it as a loop's unroll pragma (0: none)
            assert _pragmas(cand.sch.mod["main"].body) == ([limit] if limit else [])
            seen.add(limit)
            # read the same from the trace as a record stores it
            trace = _plain(TuningRecord(cand.sch.trace, search.workload).as_json())[0]
            assert unroll_of_json(trace) == unroll_of_json(json.dumps(trace)) == limit
    assert len(seen) > 1  # the search samples several
    assert unroll_of_json("not a trace") == unroll_of_json([[["Annotate"]], []]) == 0


def test_costs_are_medians_by_limit_and_the_overall_median_for_an_unseen_one() -> None:
    costs = CompileCosts()
    assert costs.expect(512) is None and costs.typical() is None
    for sec in (0.1, 0.2, 0.3):
        costs.add(0, sec)
    costs.add(512, 3.0)
    costs.add(512, 0.0)  # not built: ignored
    assert costs.expect(0) == pytest.approx(0.2)
    assert costs.expect(512) == pytest.approx(3.0)
    assert costs.expect(64) == pytest.approx(0.25)  # median of 0.1, 0.2, 0.3, 3.0


def test_a_prior_prices_what_the_task_has_not_built_scaled_to_its_own_builds() -> None:
    costs = CompileCosts.from_prior([(0, 0.2), (0, 0.4), (512, 3.0), (64, -1.0)])
    assert costs.expect(512) == pytest.approx(3.0)  # nothing built yet: the prior as it is
    assert costs.expect(16) == pytest.approx(0.4)  # a limit the prior lacks: its median
    costs.add(0, 0.6)  # this host compiles 2x the prior's (0.6 against 0.3)
    assert costs.expect(0) == pytest.approx(0.6)  # own builds of a limit come first
    assert costs.expect(512) == pytest.approx(6.0)
    assert costs.expect(64) == pytest.approx(0.6)  # in neither: own builds' median
    only = CompileCosts.from_prior([(512, 3.0)])
    only.add(0, 0.5)  # no limit in common: the ratio of the medians of all
    assert only.expect(512) == pytest.approx(3.0 * 0.5 / 3.0)


def test_pick_keeps_the_order_unless_a_candidate_costs_more_than_its_rank_is_worth() -> None:
    assert pick([1.0] * 8, 4) == [0, 1, 2, 3]  # equal costs: the model's first
    assert pick([None, 1.0, 1.0], 2) == [0, 1]  # nothing known: the model's first
    assert pick([5.0, 1.0], 4) == [0, 1]  # no more than asked for: all
    # the model's first costs 10x the others: it gives way to cheaper ones ranked below it
    assert pick([10.0] + [1.0] * 7, 4) == [1, 2, 3, 4]
    # 2x: worth its rank against the 4th and later
    assert pick([2.0] + [1.0] * 7, 4) == [0, 1, 2, 3]
    assert pick([3.0, 1.0, 3.0, 1.0, 3.0, 1.0, 3.0, 1.0], 4) == [0, 1, 3, 5]


def test_a_round_avoids_what_the_task_learnt_compiles_slowly(
    llvm_target, monkeypatch: pytest.MonkeyPatch
) -> None:
    search = _search(llvm_target, per_round=4)
    first = search.generate()
    assert first and len(first) == 4
    # the first round's builds, as the driver reports them: the unroll-512 ones took 20x
    secs = [4.0 if unroll_of(c.sch.trace) == 512 else 0.2 for c in search._pending[0]]
    search.notify([([1e-3], None)] * len(first), secs)
    for limit in (512, 0, 16, 64):  # whatever the first round drew
        search.costs.add(limit, 4.0 if limit == 512 else 0.2)
    offered: list[list[float | None]] = []

    def spy(costs: list[float | None], n: int) -> list[int]:
        offered.append(list(costs))
        return pick(costs, n)

    monkeypatch.setattr(task_module, "pick", spy)
    for _ in range(4):
        round_ = search.generate()
        assert round_ and len(round_) == 4
        cheap = sum(c == 0.2 for c in offered[-1])
        assert len(offered[-1]) == 8  # twice the round, in the model's order
        slow = sum(unroll_of(c.sch.trace) == 512 for c in search._pending[-1])
        # an unroll-512 candidate only where fewer than a round's worth of cheap ones came
        assert slow == max(0, 4 - cheap)


def test_the_first_round_is_priced_by_the_familys_recorded_builds(
    llvm_target, monkeypatch: pytest.MonkeyPatch
) -> None:
    prior = tuple((u, 4.0 if u == 512 else 0.2) for u in (0, 16, 64, 512) for _ in range(3))
    search = _search(llvm_target, per_round=4, prior=prior)
    offered: list[list[float | None]] = []

    def spy(costs: list[float | None], n: int) -> list[int]:
        offered.append(list(costs))
        return pick(costs, n)

    monkeypatch.setattr(task_module, "pick", spy)
    round_ = search.generate()  # nothing built by this task yet
    assert round_ and len(offered[0]) == 8 and None not in offered[0]
    cheap = sum(c == 0.2 for c in offered[0])
    slow = sum(unroll_of(c.sch.trace) == 512 for c in search._pending[-1])
    assert slow == max(0, 4 - cheap)
    # without a prior the first round is the model's first, whatever it costs
    blind: list[list[float | None]] = []
    monkeypatch.setattr(task_module, "pick", lambda c, n: blind.append(list(c)) or pick(c, n))
    _search(llvm_target, per_round=4).generate()
    assert blind and all(c is None for c in blind[0])


def test_a_blind_search_measures_the_model_first_whatever_it_costs(llvm_target) -> None:
    search = _search(llvm_target, per_round=4, aware=False)
    search.costs.add(512, 4.0)
    search.costs.add(0, 0.2)
    drawn = 0
    for _ in range(4):
        round_ = search.generate()
        assert round_ and len(round_) == 4
        drawn += sum(unroll_of(c.sch.trace) == 512 for c in search._pending[-1])
    assert drawn > 0  # 16 candidates, a quarter of them unrolled to 512 on average
