"""A real tune on a local Ray into SQLite, resume, and the build that reads the database."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from database import Storage, TuneFarmDatabase
from tests.conftest import TINY
from tuner.compile import apply_database, compile
from tuner.errors import TuneFarmError
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from tuner.pipeline import extract_tasks, prepare
from workers.config import MeasureConfig

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_tune_records_every_trial(tuned_db, llvm_target) -> None:
    summary = tuned_db.summary
    (task,) = summary.tasks
    assert task.name == "fused_matmul_relu"
    assert task.trials == 8 and summary.trials_measured == 8
    assert task.best_sec and task.baseline_sec
    assert task.speedup > 1.0  # tuned beats the untuned default kernel
    phases = summary.phases  # the driver's wall time by phase, for the benchmark suite
    assert set(phases) == {
        "startup", "build_wait", "run_wait", "database", "probes", "retime", "search"
    }  # fmt: skip
    assert phases["build_wait"] > 0 and phases["run_wait"] > 0 and phases["startup"] > 0
    assert phases["probes"] > 0  # preparing the untuned default: the driver's, not the search's
    from tuner.search.population import search_population

    search = summary.search  # what a round was: its candidates and its search's population
    # auto on one node measuring its own CPU: the pipelined search in a driver thread
    assert search["mode"] == "thread" and search["per_round"] >= 1 and search["actors"] == 1
    assert search["population"] == search_population(search["per_round"])
    assert sum(phases.values()) == pytest.approx(summary.wall_sec, rel=1e-6)
    devices = summary.devices  # the device measured part of the time it had budget left
    assert devices["slots"] >= 1 and 0 < devices["busy_sec"] < devices["window_sec"]
    assert 0 < devices["busy"] < 1
    from database.queries import stats

    counts = stats(Storage(tuned_db.url, create=False))
    # every new best was timed twice (repeat=2 each): the confirmation is a record of its
    # own, no trial (8 schedules for --trials 8), and the best's evidence pools both timings;
    # so is each run of the end-of-job re-timing (the top 3 schedules, 5 paired rounds)
    n_confirmed = search["confirmed"]["count"]
    assert n_confirmed >= 1 and search["confirmed"]["median_ratio"] > 0
    retimed = search["retime"]
    assert retimed["tasks"] >= 1 and phases["retime"] > 0
    assert 0 <= retimed["undecided"] <= retimed["tasks"]
    assert retimed["runs"] == sum(3 * t["rounds"] for t in retimed["by_task"])
    assert counts["schedules"] == 8
    assert counts["records"] == 8 + n_confirmed + retimed["runs"]
    assert counts["jobs"] == 1 and counts["workloads"] == 1
    from sqlalchemy import func, select

    from database.evidence import Evidence
    from database.models import RecordRow

    storage = Storage(tuned_db.url, create=False)
    with storage.engine.connect() as conn:
        rows = conn.execute(select(RecordRow.candidate_hash, RecordRow.id, RecordRow.run_secs_json))
        by_schedule: dict[str, list[tuple[int, list[float]]]] = {}
        for cand, rid, secs in rows:
            by_schedule.setdefault(cand, []).append((rid, json.loads(secs)))
        assert conn.scalar(select(func.count()).select_from(RecordRow)) == counts["records"]
    pooled = [Evidence.pool(recs) for recs in by_schedule.values()]
    assert sum(e.runs for e in pooled) == counts["records"]
    # repeat=2: two times a record, or one where a first run outlasted both repeats' minimum
    # (a busy machine; workers.measure.timed_secs); every time pooled
    assert all(len(secs) in (1, 2) for recs in by_schedule.values() for _, secs in recs)
    assert [e.samples for e in pooled] == [
        sum(len(secs) for _, secs in recs) for recs in by_schedule.values()
    ]
    model = load_model(TINY)
    mod = extract_tasks(prepare(model.mod, llvm_target), llvm_target)[0].mod
    (cand, _, ev), *_ = TuneFarmDatabase(storage).top(mod, llvm_target, 1)
    assert ev.runs == len(by_schedule[cand])  # the build's pick pools all its runs


def test_a_new_best_is_timed_again_until_the_rounds_fastest_has_two_timings() -> None:
    """The round's fastest candidate beating the task's best is measured once more; when the
    mean of both falls behind the next fastest (a lucky first timing), that one is measured
    again too; nothing is measured again when no candidate beats the best."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from tuner.job.recorder import JobRecorder
    from tuner.progress import SilentProgress, TaskState
    from workers.ledger import Entry, Ledger
    from workers.results import RunResult

    ledger = Ledger()
    keys = [ledger.add(Entry(candidate_hash=f"c{i}", artifact=object())) for i in range(3)]
    first = [1.0, 1.2, 2.5]  # c0's first timing was lucky: timed again it takes 3.0
    again = dict(zip(keys, [3.0, 1.5, 2.4], strict=True))
    asked: list[str] = []

    def remeasure(key: str, _args: object) -> RunResult:
        asked.append(key)
        return RunResult(run_secs=(again[key], again[key]))

    recorder = JobRecorder(None, ledger, [], None, 0, [], SilentProgress(), 0)
    recorder.confirm = remeasure
    builds = [BuilderResult(k, None) for k in keys]
    runs = [RunnerResult([sec, sec], None) for sec in first]
    state = TaskState(name="t", flops=None, best_sec=2.0)
    confirmed = recorder._confirmed(state, lambda i: (None, []), builds, runs)
    assert asked == [keys[0], keys[1]]  # c0 (now 2.0 on average), then c1 (1.35)
    assert confirmed == {0: [3.0, 3.0], 1: [1.5, 1.5]}
    assert recorder.confirm_note() == {"count": 2, "median_ratio": 2.125}
    asked.clear()
    behind = TaskState(name="t", flops=None, best_sec=0.5)  # no candidate beats the best
    assert recorder._confirmed(behind, lambda i: (None, []), builds, runs) == {} and not asked


def test_resume_spends_no_trial_twice(tuned_db, llvm_target) -> None:
    model = load_model(TINY)
    storage = Storage(tuned_db.url)
    config = TuneConfig(trials=8, trials_per_iter=8, measure=MeasureConfig(min_repeat_ms=10))
    again = tune(model.mod, llvm_target, storage, config, model_name="tiny")
    assert again.trials_before == 8 and again.trials_measured == 0
    assert (
        TuneFarmDatabase(storage).count_records(
            extract_tasks(prepare(model.mod, llvm_target), llvm_target)[0].mod, llvm_target
        )
        == 8
    )


def test_build_applies_the_tuned_schedule(tuned_db, llvm_target) -> None:
    model = load_model(TINY)
    db = TuneFarmDatabase(Storage(tuned_db.url, create=False))
    applied = apply_database(model.mod, llvm_target, db)
    default = prepare(model.mod, llvm_target)
    name = "fused_matmul_relu"
    assert applied[name].attrs["tirx.is_scheduled"]
    assert not tvm_ffi.structural_equal(applied[name], default[name])
    ex, report = compile(model.mod, llvm_target, db, strict=True)
    assert report.tuned_share == 1.0 and report.kernels[0].level == "device"
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64)).astype("float32")
    w = rng.standard_normal((64, 32)).astype("float32")
    out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(out, model.numpy_reference(x, w), rtol=1e-4, atol=1e-4)


def test_strict_build_fails_without_records(sqlite_url, llvm_target) -> None:
    model = load_model(TINY)
    with pytest.raises(TuneFarmError, match="no tuned record: fused_matmul_relu"):
        compile(model.mod, llvm_target, TuneFarmDatabase(Storage(sqlite_url)), strict=True)


@I.ir_module
class TwoKernels:
    """Two tunable kernels: the task scheduler's rounds alternate between them."""

    @R.function
    def main(
        x: R.Tensor((32, 64), "float32"),
        w: R.Tensor((64, 32), "float32"),
        v: R.Tensor((32, 16), "float32"),
    ) -> R.Tensor((32, 16), "float32"):
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            z = R.matmul(y, v)
            R.output(z)
        return z


def test_trial_budget_is_a_hard_cap(sqlite_url, llvm_target) -> None:
    """--trials N measures N schedules, never more (a new best's confirmation is a record of
    its own, not a trial): the default schedules count, a resumed job counts what is there,
    and the last round is cut to the budget.

    Two tasks, 9 searched trials: rounds of 2 (trials_per_round), so an uncut last round
    stored 12 records for a budget of 11."""
    from database.queries import stats
    from workers.connection import RayConnection

    def records() -> int:
        return stats(Storage(sqlite_url, create=False))["schedules"]

    def run(trials: int) -> None:
        measure = MeasureConfig(min_repeat_ms=2, repeat=1)
        config = TuneConfig(trials=trials, trials_per_iter=4, seed=3, measure=measure)
        summary = tune(TwoKernels, llvm_target, Storage(sqlite_url), config, model_name="two")
        assert summary.trials_before + summary.trials_measured == records()

    with RayConnection(num_cpus=2):  # one Ray for both jobs
        run(1)  # two default schedules measured, one recorded
        assert records() == 1
        run(11)  # resumed: 10 more (the other default schedule and 9 searched)
        assert records() == 11


@pytest.mark.parametrize("search", ["driver", "thread"])
def test_time_budget_ends_the_search(sqlite_url, llvm_target, search: str) -> None:
    """--time-budget: the search stops at the deadline, far short of its trials (MetaSchedule's
    C++ loop unwound in the driver; the pipelined loop ends with the budget), and the job ends
    as usual with every record it measured; rounds are capped for a timed job."""
    from database.queries import stats
    from workers.connection import RayConnection

    measure = MeasureConfig(min_repeat_ms=2, repeat=1)
    # on a slow 2-core CI machine 15 s left no searched candidate (startup took most)
    budget = 40.0
    # far more trials than 40 s can measure (the pipelined search measured 400 in less)
    config = TuneConfig(trials=4000, seed=3, measure=measure, search=search, time_budget_sec=budget)
    assert config.round_cap == 16 < config.trials_per_iter
    with RayConnection(num_cpus=2):
        summary = tune(TwoKernels, llvm_target, Storage(sqlite_url), config, model_name="two")
    assert summary.stopped_by == "time_budget"
    # the defaults and whatever the search measured by the deadline (none when other work
    # holds the cores: beside two CPU hogs the thread search measured nothing in 40 s)
    assert 2 <= summary.trials_measured < 4000
    assert summary.wall_sec < budget + 30.0  # the round in flight and the range probes only
    # the end-of-job re-timing starts no task past the deadline (it used to run after it);
    # absent when the search measured nothing
    retimed = summary.search.get("retime")
    assert retimed is None or (retimed["cut_by_time"] and retimed["runs"] == 0)
    # rounds cut to what ends before the deadline; no search at all when the defaults'
    # measurement took the whole budget (beside two CPU hogs), and then only they were measured
    assert summary.search.get("cut_by_time", -1) >= 0 or summary.trials_measured == 2
    storage = Storage(sqlite_url, create=False)
    assert stats(storage)["schedules"] == summary.trials_measured  # nothing lost
    from database.models import JobRow

    with storage.transaction(write=False) as session:
        assert [j.status for j in session.query(JobRow).all()] == ["done"]
    with pytest.raises(TuneFarmError, match="time budget"):
        TuneConfig(trials=8, time_budget_sec=0)


def test_search_population_is_sized_from_the_round() -> None:
    from tuner.job import TuneConfig
    from tuner.job.modes import _strategy
    from tuner.search.population import MAX_POPULATION, MIN_POPULATION, search_population

    assert search_population(1) == search_population(4) == MIN_POPULATION  # 64
    assert search_population(8) == 64 and search_population(16) == 128
    assert search_population(32) == 256
    assert search_population(64) == search_population(1000) == MAX_POPULATION  # stock's 512
    assert _strategy(TuneConfig(trials=8), 1).population_size == MIN_POPULATION
    assert _strategy(TuneConfig(trials=8, population=512), 1).population_size == 512
    with pytest.raises(TuneFarmError, match="population must be at least 2"):
        TuneConfig(trials=8, population=1)


def test_runners_time_kernels_on_the_targets_cores() -> None:
    """A job's runners use the target's num-cores (what its schedules parallelize for and
    bench runs with) unless the measure config says otherwise; GPUs have no such count."""
    from tuner.job.config import measure_for
    from tuner.targets import resolve_target

    cpu = tvm.target.Target({"kind": "llvm", "num-cores": 3})
    assert measure_for(MeasureConfig(), cpu).threads == 3
    assert measure_for(MeasureConfig(threads=1), cpu).threads == 1
    assert measure_for(MeasureConfig(), tvm.target.Target({"kind": "llvm"})).threads is None
    assert measure_for(MeasureConfig(), resolve_target("cuda", "sm_80")).threads is None


def test_search_generations_reach_the_evolutionary_search() -> None:
    from tuner.job import TuneConfig
    from tuner.job.modes import _strategy
    from tuner.search.driver import SearchPlan
    from tuner.search.task import GENERATIONS

    assert _strategy(TuneConfig(trials=8), 4).genetic_num_iters == GENERATIONS == 2
    assert _strategy(TuneConfig(trials=8, generations=4), 4).genetic_num_iters == 4
    with pytest.raises(TuneFarmError, match="generations must be at least 1"):
        TuneConfig(trials=8, generations=0)
    with pytest.raises(TuneFarmError, match="1 generation"):
        SearchPlan(per_round=4, population=64, generations=0)


@I.ir_module
class RowsMatmul:
    """One matmul whose rows are symbolic: a kernel family tuned per bucket of ``n``."""

    @R.function
    def main(x: R.Tensor(("n", 32), "float32"), w: R.Tensor((32, 32), "float32")) -> R.Tensor(
        ("n", 32), "float32"
    ):
        with R.dataflow():
            y = R.matmul(x, w)
            R.output(y)
        return y


@pytest.mark.ray
def test_a_warm_job_first_measures_the_kernels_best_schedules_at_other_buckets(
    sqlite_url, llvm_target
) -> None:
    """A job at a new bucket of a kernel the database holds at another: its first searched
    candidates are the other bucket's best schedules refitted to the new shape (and without
    a warm start, they are not); with a small budget, fewer of them."""
    import json

    from sqlalchemy import select

    from database.models import RecordRow, WorkloadRow
    from workers.connection import RayConnection

    measure = MeasureConfig(min_repeat_ms=2, repeat=1)
    storage = Storage(sqlite_url)
    searches: list[dict] = []  # each job's summary.search

    def run(bucket: int, trials: int, **kw: object) -> list[tuple[str, list]]:
        config = TuneConfig(trials=trials, trials_per_iter=4, seed=3, measure=measure, **kw)
        summary = tune(RowsMatmul, llvm_target, storage, config, buckets={"n": [bucket]})
        searches.append(summary.search)
        query = (
            select(WorkloadRow.mod_json, RecordRow.trace_json)
            .join(WorkloadRow)
            .where(RecordRow.job_id == summary.job_id)
            .order_by(RecordRow.id)
        )
        rows = storage.run(lambda s: list(s.execute(query)), write=False)
        seen: set[tuple[str, str]] = set()  # a schedule once (its confirmation is a record too)
        out = []
        for mod, trace in rows:
            if json.loads(trace)[0] and (mod, trace) not in seen:
                seen.add((mod, trace))
                out.append((mod, json.loads(trace)))
        return out

    with RayConnection(num_cpus=2):
        run(16, 9, warm_start=False)  # a teammate's job: the default and 8 searched
        # the default and 8 rounds of 4: a share of 33 trials allows 4 siblings (one in 8)
        searched = run(64, 33)
        assert len(searched) >= 8  # (a candidate may fail to build or run)
        mod64 = tvm.ir.load_json(searched[0][0])
        refitted = TuneFarmDatabase(storage, llvm_target).siblings(mod64, 4)
        assert len(refitted) == 4  # never the default schedule (measured anyway)
        expected = {json.dumps(t.as_json()[1], default=int) for t in refitted}
        first = {json.dumps(trace[1], default=int) for _, trace in searched[:4]}
        assert first == expected
        small = run(32, 9)  # a share of 9 trials: one sibling, then the search
        mod32 = tvm.ir.load_json(small[0][0])
        (one,) = TuneFarmDatabase(storage, llvm_target).siblings(mod32, 1)
        assert json.dumps(small[0][1][1], default=int) == json.dumps(one.as_json()[1], default=int)
        cold = run(128, 9, warm_start=False)
        assert len(cold) == 8
        mod128 = tvm.ir.load_json(cold[0][0])
        expected = {
            json.dumps(t.as_json()[1], default=int)
            for t in TuneFarmDatabase(storage, llvm_target).siblings(mod128, 4)
        }
        assert {json.dumps(trace[1], default=int) for _, trace in cold[:4]} != expected
    # the summary says how each job started: tasks seeded and schedules sent, the cost model
    seeded = [(s["sibling_tasks"], s["siblings"]) for s in searches]
    assert seeded == [(0, 0), (1, 4), (1, 1), (0, 0)]
    assert searches[0]["cost_model"].startswith("base: cold;")
    assert not searches[1]["cost_model"].startswith("base: cold;")  # the teammate's records


def test_buckets_of_one_kernel_exchange_their_best_schedules_during_a_job(
    sqlite_url, llvm_target
) -> None:
    """A cold job on two buckets of one kernel with ``--exchange``: a bucket's later round
    measures the other bucket's best schedule found by the job so far, refitted; a job without
    the option does not."""
    import json

    from sqlalchemy import select
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from database.models import RecordRow, WorkloadRow
    from database.transfer import adapt_trace
    from workers.connection import RayConnection

    measure = MeasureConfig(min_repeat_ms=2, repeat=1)

    def run(url: str, **kw: object) -> tuple[dict, dict[str, list]]:
        storage = Storage(url)
        config = TuneConfig(trials=18, trials_per_iter=4, seed=3, measure=measure, **kw)
        summary = tune(RowsMatmul, llvm_target, storage, config, buckets={"n": [16, 64]})
        query = (
            select(WorkloadRow.mod_json, RecordRow.trace_json, RecordRow.mean_sec)
            .join(WorkloadRow)
            .order_by(RecordRow.id)
        )
        by_mod: dict[str, list] = {}
        for mod, trace, sec in storage.run(lambda s: list(s.execute(query)), write=False):
            if json.loads(trace)[0]:  # not the default
                by_mod.setdefault(mod, []).append((json.loads(trace), sec))
        return summary.search, by_mod

    def exchanged(by_mod: dict[str, list]) -> int:
        """Records of one bucket whose decisions are another bucket's record's, refitted."""
        (a, recs_a), (b, recs_b) = by_mod.items()
        mods = {a: tvm.ir.load_json(a), b: tvm.ir.load_json(b)}
        hits = 0
        for src, dst, recs_src, recs_dst in ((a, b, recs_a, recs_b), (b, a, recs_b, recs_a)):
            mine = {json.dumps(t[1], default=int) for t, _ in recs_dst}
            for trace, sec in recs_src:
                if sec is None:
                    continue
                tr = TuningRecord.from_json([trace, None, None, None], Workload(mods[src])).trace
                moved = adapt_trace(tr, mods[dst])
                if moved is not None and json.dumps(moved.as_json()[1], default=int) in mine:
                    hits += 1
        return hits

    with RayConnection(num_cpus=2):
        info, by_mod = run(sqlite_url, exchange=True)
        assert info["exchanged"] >= 1 and len(by_mod) == 2
        assert exchanged(by_mod) >= 1
        off, by_mod = run(sqlite_url.replace(".db", "-off.db"))
        assert off["exchanged"] == 0 and exchanged(by_mod) == 0


ROOT = Path(__file__).parents[2]


def _tune_cli(db: Path, model: Path, trials: int) -> subprocess.Popen[str]:
    """``tunefarm tune`` of this tree with its output piped (no terminal)."""
    opts = ["--per-iter", "2", "--seed", "0", "--min-repeat-ms", "2", "--db", f"sqlite:///{db}"]
    return subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "tune", str(model), "--trials", str(trials), *opts],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _progress(out: str) -> list[tuple[int, int]]:
    """(done, total) of each progress line."""
    lines = [ln.split(" trials")[0].removeprefix("tuning: ") for ln in out.splitlines()]
    return [(int(d), int(t)) for d, t in (ln.split("/") for ln in lines if "/" in ln)]


def _jobs(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT status, trials_done FROM jobs ORDER BY id").fetchall()


def test_a_piped_tune_warns_reports_as_it_goes_and_counts_its_trials_one_way(
    tmp_path: Path,
) -> None:
    """``tune examples/mlp.py --trials 3 > log``: a warning that 3 trials cannot cover its 2
    tasks; progress lines over the budget of 3 from the search's start (the 2 defaults
    recorded), not one drawing at the end; the lines, the job row and the records agree;
    every workload named by its task."""
    db = tmp_path / "t.db"
    proc = _tune_cli(db, ROOT / "examples" / "mlp.py", 3)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "3 trial(s) cannot cover 2 task(s)" in err
    seen = _progress(out)
    assert seen[0] == (2, 3) and seen[-1] == (3, 3)
    assert all(t == 3 for _, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    from database.queries import list_workloads, stats

    storage = Storage(f"sqlite:///{db}", create=False)
    assert _jobs(db) == [("done", 3)] and stats(storage)["schedules"] == 3
    names = [w["task"] for w in list_workloads(storage)]
    assert len(names) == 2 and all(names) and any("gelu" in n for n in names)


def test_two_concurrent_jobs_on_one_database_each_count_to_their_budget(tmp_path: Path) -> None:
    """Two ``--trials 8`` jobs of one model at once: neither shows nor records more than 8 of 8
    (each counts the records there when it started and its own)."""
    db = tmp_path / "t.db"
    Storage(f"sqlite:///{db}")  # the schema, before either job opens it
    first, second = _tune_cli(db, TINY, 8), _tune_cli(db, TINY, 8)
    for proc in (first, second):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        seen = _progress(out)
        assert seen and all(d <= t == 8 for d, t in seen)
    jobs = _jobs(db)
    assert [s for s, _ in jobs] == ["done", "done"] and all(n <= 8 for _, n in jobs)
