"""TuneFarm's best of a task: the schedule with the lowest median over the run times of all
its records, with its evidence; and everything that reads records per schedule (import, merge,
prune, the builder's measured set, training rows) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import TuningRecord
from typer.testing import CliRunner

from database import Storage, TargetKey, TuneFarmDatabase, shash_of
from database.errors import DatabaseError
from database.evidence import Evidence
from database.models import RecordRow
from database.sharing import import_metaschedule, merge, prune
from database.training import training_rows
from tests.conftest import matmul_mod
from tuner.cli import app

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _candidate(mod: tvm.IRModule, loop: int, factor: int) -> tvm.s_tir.Schedule:
    sch = tvm.s_tir.Schedule(mod)
    sch.split(sch.get_loops(sch.get_sblock("C"))[loop], [None, factor])
    return sch


CANDIDATES = [(loop, f) for loop in range(3) for f in (2, 4, 8, 16)]


def _commit(db: ms.database.Database, mod: tvm.IRModule, sch, secs: list[float]) -> None:
    workload = db.commit_workload(mod)
    args = ArgInfo.from_prim_func(mod["main"])
    db.commit_tuning_record(TuningRecord(sch.trace, workload, secs, TARGET, args))


def test_the_best_is_the_lowest_pooled_median_not_the_luckiest_run(any_url: str) -> None:
    """A: one lucky 1 us run, then two runs at 3 us; B: 2 us twice. Stock answers A's lucky
    record; TuneFarm answers B, with the evidence of each."""
    mod = matmul_mod()
    a, b = _candidate(mod, 0, 2), _candidate(mod, 1, 4)
    tf, stock = TuneFarmDatabase(Storage(any_url)), ms.database.MemoryDatabase()
    for db in (tf, stock):
        _commit(db, mod, a, [1e-6])
        _commit(db, mod, a, [3e-6, 3e-6])
        _commit(db, mod, b, [2e-6, 2e-6])
    lucky = stock.query_tuning_record(mod, TARGET, "main")
    assert [float(s) for s in lucky.run_secs] == pytest.approx([1e-6])
    found = tf.best(mod, TARGET)
    assert found is not None and found.level == "target"
    assert shash_of(tvm.s_tir.Schedule(mod, debug_mask=0).mod) != shash_of(b.mod)
    applied = tf.query_ir_module(mod, TARGET, "main")
    assert tvm_ffi.structural_equal(applied, b.mod)
    ev = found.evidence
    assert (ev.runs, ev.samples, ev.median, ev.spread, ev.confirmed) == (1, 2, 2e-6, 0.0, False)
    assert [float(s) for s in found.record.run_secs] == pytest.approx([2e-6, 2e-6])
    # A, once more at 1 us: pooled [1, 3, 3, 1, 1] -> median 1 us, confirmed by three runs
    _commit(tf, mod, a, [1e-6, 1e-6])
    found = tf.best(mod, TARGET)
    assert found is not None and tvm_ffi.structural_equal(
        tf.query_ir_module(mod, TARGET, "main"), a.mod
    )
    ev = found.evidence
    assert (ev.runs, ev.samples, ev.median, ev.confirmed) == (3, 5, 1e-6, True)
    assert ev.spread == pytest.approx((3e-6 - 1e-6) / 1e-6)
    assert found.mean_sec == pytest.approx(statistics.fmean([1e-6, 3e-6, 3e-6, 1e-6, 1e-6]))


def test_a_tie_goes_to_more_runs_then_to_the_first_measured(sqlite_url: str) -> None:
    mod = matmul_mod()
    a, b, c = _candidate(mod, 0, 2), _candidate(mod, 1, 4), _candidate(mod, 2, 8)
    db = TuneFarmDatabase(Storage(sqlite_url))
    _commit(db, mod, a, [2e-6])
    _commit(db, mod, b, [2e-6])
    assert tvm_ffi.structural_equal(db.query_ir_module(mod, TARGET, "main"), a.mod)
    _commit(db, mod, c, [2e-6])
    _commit(db, mod, c, [1e-6, 3e-6])  # pooled median 2 us in two runs
    assert tvm_ffi.structural_equal(db.query_ir_module(mod, TARGET, "main"), c.mod)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_indexed_search_finds_what_pooling_everything_finds(any_url: str, seed: int) -> None:
    """Random records (1-3 runs of 1-4 samples per schedule): the best read from the median
    index with its early stop equals the best of every schedule's pooled samples."""
    rng = random.Random(seed)
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(any_url))
    runs: dict[int, list[list[float]]] = {}
    order = []
    for i in range(len(CANDIDATES)):
        for _ in range(rng.randint(1, 3)):
            order.append(
                (i, [rng.choice([1, 2, 3, 4, 5, 8]) * 1e-6 for _ in range(rng.randint(1, 4))])
            )
    rng.shuffle(order)
    first: dict[int, int] = {}
    for n, (i, secs) in enumerate(order):
        runs.setdefault(i, []).append(secs)
        first.setdefault(i, n)
        _commit(db, mod, _candidate(mod, *CANDIDATES[i]), secs)

    def key(i: int) -> tuple[float, int, int]:
        pooled = [s for run in runs[i] for s in run]
        return (statistics.median(pooled), -len(runs[i]), first[i])

    want = min(runs, key=key)
    found = db.best(mod, TARGET)
    assert found is not None
    assert tvm_ffi.structural_equal(
        db.query_ir_module(mod, TARGET, "main"), _candidate(mod, *CANDIDATES[want]).mod
    )
    assert found.evidence.median == pytest.approx(key(want)[0])
    assert found.evidence.runs == len(runs[want])


def test_evidence_of_pooled_runs() -> None:
    ev = Evidence.pool([(7, [4.0, 2.0]), (3, [3.0, 1.0, 5.0])])
    assert (ev.runs, ev.samples, ev.median, ev.first_id, ev.confirmed) == (2, 5, 3.0, 3, True)
    assert ev.spread == pytest.approx((4.0 - 2.0) / 3.0)  # quartiles 2 and 4 of 1..5
    one = Evidence.pool([(1, [2.0])])
    assert one.spread is None and not one.confirmed
    assert one.to_dict() == {
        "runs": 1,
        "samples": 1,
        "median": 2.0,
        "spread": None,
        "confirmed": False,
    }


def test_the_build_follows_the_retimings_verdict_among_what_it_compared(any_url: str) -> None:
    """A re-timing compared A (incumbent) and B and kept A (B only tied), yet B's pooled
    median is lower: the best, ``top``, ``db best`` and a best-only export all answer A. C,
    which it did not compare, still wins by its median; a newer verdict replaces the old
    one; a winner without records left is passed over."""
    from database.sharing import best_record_ids
    from database.verdicts import Verdict

    mod = matmul_mod()
    a, b, c = _candidate(mod, 0, 2), _candidate(mod, 1, 4), _candidate(mod, 2, 8)
    db = TuneFarmDatabase(Storage(any_url))
    _commit(db, mod, a, [3e-6, 3e-6])
    _commit(db, mod, b, [2e-6, 2e-6])
    _commit(db, mod, c, [5e-6])

    def hashes() -> list[str]:
        return [h for h, _, _ in db.top(mod, TARGET, 3)]

    def best_is(sch: tvm.s_tir.Schedule) -> bool:
        return tvm_ffi.structural_equal(db.query_ir_module(mod, TARGET, "main"), sch.mod)

    h_b, h_a, h_c = hashes()
    assert best_is(b)
    db.add_verdict(mod, TARGET, Verdict(h_a, frozenset({h_a, h_b}), 5))
    assert best_is(a) and hashes() == [h_a, h_b, h_c]
    assert [h for h, _, _ in db.top(mod, TARGET, 1)] == [h_a]  # the winner read beyond k
    found = db.best(mod, TARGET)
    assert found is not None and found.evidence.median == pytest.approx(3e-6)
    result = CliRunner().invoke(app, ["db", "best", "--db", any_url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["median"] == pytest.approx(3e-6)
    kept = db.storage.run(best_record_ids, write=False)
    assert len(kept) == 1  # A's one record
    _commit(db, mod, c, [1e-6, 1e-6, 1e-6])  # C: not compared, now the fastest by far
    assert best_is(c)
    db.add_verdict(mod, TARGET, Verdict(h_b, frozenset({h_a, h_b, h_c}), 5))
    assert best_is(b)  # the newest verdict: B over A and C
    with pytest.raises(ValueError, match="winner"):
        Verdict(h_a, frozenset({h_b}), 5)
    db.storage.run(
        lambda s: s.execute(RecordRow.__table__.delete().where(RecordRow.candidate_hash == h_b))
    )
    assert best_is(c)  # B's records gone: the verdict is passed over


def test_verdicts_travel_with_their_records(any_url: str, tmp_path: Path) -> None:
    """A copy picks what its source picks: merge, a MetaSchedule export then import and a
    pack carry the verdict (once, however often repeated); a bad verdict line is one error
    naming it, and nothing is stored. ``prune --keep-top`` keeps the verdict's winner."""
    from database.sharing import VERDICT_FILE, export_metaschedule, export_pack
    from database.verdicts import Verdict
    from database.verdicts import rows as verdicts_of

    mod = matmul_mod()
    a, b = _candidate(mod, 0, 2), _candidate(mod, 1, 4)
    source = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'source.db'}"))
    _commit(source, mod, a, [3e-6, 3e-6])
    _commit(source, mod, b, [2e-6, 2e-6])  # B's median is lower; the re-timing kept A
    h_a, h_b = (h for h, _, _ in sorted(source.top(mod, TARGET, 2), key=lambda t: -t[2].median))
    source.add_verdict(mod, TARGET, Verdict(h_a, frozenset({h_a, h_b}), 5))

    def picks_a(db: TuneFarmDatabase) -> bool:
        return tvm_ffi.structural_equal(db.query_ir_module(mod, TARGET, "main"), a.mod)

    def verdict_rows(storage: Storage) -> int:
        return storage.run(lambda s: len(verdicts_of(s)), write=False)

    assert picks_a(source)
    merged = TuneFarmDatabase(Storage(any_url))
    for _ in range(2):
        merge(merged.storage, str(source.storage.url))
    assert picks_a(merged) and verdict_rows(merged.storage) == 1
    out = tmp_path / "ms"
    export_metaschedule(source.storage, out)
    (line,) = (out / VERDICT_FILE).read_text().splitlines()
    assert json.loads(line)["winner"] == h_a
    imported = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'imported.db'}"))
    bad = {**json.loads(line), "winner": "f" * 32}  # a winner it did not compare
    (out / VERDICT_FILE).write_text(json.dumps(bad) + "\n")
    with pytest.raises(DatabaseError, match=rf"{VERDICT_FILE}:1: expected a verdict"):
        import_metaschedule(imported.storage, out)
    assert verdict_rows(imported.storage) == 0
    (out / VERDICT_FILE).write_text(line + "\n")
    import_metaschedule(imported.storage, out)
    assert picks_a(imported) and verdict_rows(imported.storage) == 1
    export_pack(source.storage, tmp_path / "pack.db")
    pack = TuneFarmDatabase(Storage(f"sqlite:///{tmp_path / 'pack.db'}", create=False))
    assert picks_a(pack) and verdict_rows(pack.storage) == 1
    # prune --keep-top 1 keeps what the build picks: the winner, not the lower median
    assert prune(merged.storage, keep_top=1).beyond_top == 1
    assert picks_a(merged)


def test_db_best_json_shows_the_evidence_per_kernel(sqlite_url: str) -> None:
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(sqlite_url))
    a, b = _candidate(mod, 0, 2), _candidate(mod, 1, 4)
    _commit(db, mod, a, [2e-6, 2e-6, 4e-6])
    _commit(db, mod, a, [2e-6])
    _commit(db, mod, b, [1e-6])
    _commit(db, mod, b, [9e-6, 9e-6])
    result = CliRunner().invoke(app, ["db", "best", "--db", sqlite_url, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["runs"] == 2 and row["samples"] == 4 and row["confirmed"] is True
    assert row["median"] == pytest.approx(2e-6) and row["spread"] == pytest.approx(0.25)
    table = CliRunner().invoke(app, ["db", "best", "--db", sqlite_url])
    assert table.exit_code == 0 and "spread" in table.output and "runs" in table.output
    stats = CliRunner().invoke(app, ["db", "stats", "--db", sqlite_url, "--json"])
    assert json.loads(stats.stdout)["records"] == 4 and json.loads(stats.stdout)["schedules"] == 2


def test_import_and_merge_are_idempotent_by_record_not_by_trace(
    any_url: str, tmp_path: Path
) -> None:
    """A stock database with one trace timed three times, one record twice: import stores the
    two distinct records (a re-measurement is a record, the same record twice is one); again,
    nothing. Merging that database into another does the same."""
    mod = matmul_mod()
    sch = _candidate(mod, 1, 8)
    (tmp_path / "ms").mkdir()
    stock = ms.database.JSONDatabase(work_dir=str(tmp_path / "ms"))
    for secs in ([2e-6, 3e-6], [4e-6], [2e-6, 3e-6]):
        _commit(stock, mod, sch, secs)
    storage = Storage(any_url)
    first = import_metaschedule(storage, tmp_path / "ms")
    assert (first.records, first.added) == (3, 2)
    assert import_metaschedule(storage, tmp_path / "ms").added == 0
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    assert merge(Storage(other_url), any_url).added == 2
    assert merge(Storage(other_url), any_url).added == 0
    found = TuneFarmDatabase(Storage(other_url)).best(mod, TARGET)
    assert found is not None and (found.evidence.runs, found.evidence.samples) == (2, 3)


def test_prune_keeps_every_run_of_the_best_schedule(sqlite_url: str) -> None:
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(sqlite_url))
    a, b = _candidate(mod, 0, 2), _candidate(mod, 1, 4)
    _commit(db, mod, a, [1e-6])  # a's lowest record: first by the index, not the best
    _commit(db, mod, a, [5e-6, 5e-6])
    _commit(db, mod, b, [2e-6])
    _commit(db, mod, b, [2e-6])
    assert prune(db.storage, keep_top=1, dry_run=True).beyond_top == 2
    prune(db.storage, keep_top=1)
    assert len(db) == 2
    assert tvm_ffi.structural_equal(db.query_ir_module(mod, TARGET, "main"), b.mod)


def test_search_and_training_see_a_schedule_once(sqlite_url: str) -> None:
    """The builder's measured set pools a candidate's runs, a task's trial count counts it
    once, and the cost model trains on one row per schedule."""
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(sqlite_url))
    a, b = _candidate(mod, 0, 2), _candidate(mod, 1, 4)
    _commit(db, mod, a, [1e-6, 3e-6])
    _commit(db, mod, a, [5e-6])
    _commit(db, mod, b, None)  # failed
    measured = db.measured([shash_of(a.mod), shash_of(b.mod)], TARGET)
    assert json.loads(measured[shash_of(a.mod)].run_secs_json) == [1e-6, 3e-6, 5e-6]
    assert measured[shash_of(b.mod)].mean_sec is None
    assert db.count_records(mod, TARGET) == 2 and len(db) == 3
    rows = training_rows(db.storage, "llvm", TargetKey.of(TARGET).arch)
    assert sorted(r[2] is None for r in rows) == [False, True]
    (valid,) = [r for r in rows if r[2] is not None]
    assert valid[2] == pytest.approx(statistics.fmean([2e-6, 5e-6]))
