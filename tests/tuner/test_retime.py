"""The end-of-job re-timing (:mod:`tuner.job.retime`): the challenger rule on synthetic paired
rounds, and the re-timing of real schedules on the real builder and runner into SQLite."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from database import Storage, TargetKey, TuneFarmDatabase, verdicts
from tests.conftest import TINY
from tests.records import commit as _commit
from tuner.job.retime import retime, winner
from tuner.model import load_model
from tuner.pipeline import extract_tasks, prepare
from workers.builder import RayBuilder
from workers.config import MeasureConfig
from workers.connection import RayConnection
from workers.ledger import Ledger
from workers.runner import RayRunner


def _rounds(ratios: list[float], n: int = 8, noise: float = 0.03) -> list[list[float]]:
    """``n`` paired rounds: the incumbent about 1 ms, candidate c about ``ratios[c - 1]`` ms,
    each time with ``noise`` (a fixed seed)."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        base = 1e-3 * (1 + noise * rng.standard_normal())
        out.append([base] + [base * r * (1 + noise * rng.standard_normal()) for r in ratios])
    return out


def test_a_challenger_that_only_ties_is_not_promoted() -> None:
    won, ratios = winner(_rounds([1.0, 1.01]))
    assert won == 0 and all(r == pytest.approx(1.0, abs=0.05) for r in ratios)
    won, _ = winner(_rounds([1.0, 0.7]))  # the second challenger is 30% faster
    assert won == 2
    won, ratios = winner(_rounds([0.8, 0.6]))  # both faster: the fastest wins
    assert won == 2 and ratios[1] < ratios[0] < 1
    assert winner(_rounds([0.5], n=2))[0] == 0  # too few rounds decide nothing
    assert winner(_rounds([1.3]))[0] == 0  # a slower challenger never


@pytest.mark.slow
@pytest.mark.ray
def test_the_top_schedules_are_retimed_on_the_runner_and_every_run_is_pooled(
    tmp_path, llvm_target
) -> None:
    """Four schedules of the tiny matmul, recorded with made-up times far below any real one
    (ranked as listed): the re-timing builds the top three again, times them interleaved for
    the rounds asked (one worker) and records every run, so their evidence pools them. Their
    real times put the fourth first by pooled median: a second pass re-times it with the new
    top three, and the build's pick ends up a re-timed schedule."""
    db = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'rt.db'}"), llvm_target)
    (task,) = extract_tasks(prepare(load_model(TINY).mod, llvm_target), llvm_target)
    db.workload_id(task.mod, create=True, task_name=task.name)
    traces = [tvm.s_tir.Schedule(task.mod).trace]
    for factors in ([4, 8], [8, 4], [2, 16]):
        sch = tvm.s_tir.Schedule(task.mod)
        loop = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[0])[1]
        sch.split(loop, sch.sample_perfect_tile(loop, n=2, decision=factors))
        traces.append(sch.trace)
    for i, trace in enumerate(traces):
        _commit(db, task.mod, trace, [1e-12 * (i + 1)])
    ranked = [h for h, _, _ in db.top(task.mod, llvm_target, 4)]
    assert len(ranked) == 4
    measure = MeasureConfig(repeat=2, min_repeat_ms=5)
    with RayConnection(num_cpus=2):
        ledger = Ledger()
        builder = RayBuilder(ledger, measure, db)
        runner = RayRunner(ledger, measure, "cpu", exclusive=True)
        try:
            first, second = retime([task], llvm_target, builder, runner, db, None, 3, 4).passes
        finally:
            runner.shutdown()
    assert first.candidates == tuple(ranked[:3]) and first.rounds == 4
    assert len(first.ratios) == 2
    assert second.candidates[0] == ranked[3] and second.rounds == 4
    after = {h: ev for h, _, ev in db.top(task.mod, llvm_target, 4)}
    runs = {h: after[h].runs - 1 for h in ranked}  # the re-timing's records of each
    for h in ranked:  # every timed run a record of its schedule, pooled
        timed = (h in first.candidates) + (h in second.candidates)
        assert runs[h] == 4 * timed
        # repeat=2: two times a run, or one where a first run outlasted both repeats' minimum
        # (beside two CPU hogs)
        assert 1 + runs[h] <= after[h].samples <= 1 + 2 * runs[h]
    assert second.pick in set(first.candidates) | set(second.candidates)
    assert second.pick == db.top(task.mod, llvm_target, 1)[0][0]
    # the verdict is stored and the build follows it: its pick is the rule's winner
    assert second.agrees and db.best(task.mod, llvm_target).record.trace is not None
    with db.storage.engine.connect() as conn:
        verdict = verdicts.newest(conn)[(db.workload_id(task.mod), TargetKey.of(llvm_target).key)]
    assert verdict.winner == second.pick and verdict.rounds == 4
    assert verdict.compared == set(first.candidates) | set(second.candidates)
    assert not ledger.entries  # the artifacts released
