"""The SQL schedule database behind MetaSchedule's interface, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
import tvm
import tvm_ffi
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import TuningRecord

from database import DatabaseError, Measurement, Storage, TuneFarmDatabase, redact, shash_of
from database.queries import stats
from tests.conftest import matmul_mod


def _candidate(mod: tvm.IRModule, factor: int, name: str = "C") -> tvm.s_tir.Schedule:
    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_sblock(name)
    i, _j, _k = sch.get_loops(block)
    sch.split(i, [None, factor])
    return sch


def _measure(db, mod, sch, target, secs, **kw) -> bool:
    workload = db.commit_workload(mod)
    trace, _, _, args = TuningRecord(
        sch.trace, workload, None, target, ArgInfo.from_prim_func(mod["main"])
    ).as_json()
    return db.add(
        Measurement(
            workload=workload,
            candidate_hash=shash_of(sch.mod),
            trace_json=trace,
            args_info_json=args,
            run_secs=secs,
            target=target,
            **kw,
        )
    )


def test_record_round_trip_and_top_k(any_url: str) -> None:
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    db = TuneFarmDatabase(Storage(any_url), target)
    mod = matmul_mod()
    assert not db.has_workload(mod)
    for factor, sec in ((2, 3e-6), (4, 1e-6), (8, 2e-6)):
        assert _measure(db, mod, _candidate(mod, factor), target, [sec, sec])
    assert db.has_workload(mod)
    # a candidate measured again is a record of its own; its schedule pools both runs
    assert _measure(db, mod, _candidate(mod, 4), target, [9e-6])
    top = db.get_top_k(db.commit_workload(mod), 2)
    assert [float(r.run_secs[0]) for r in top] == pytest.approx([1e-6, 2e-6])
    assert len(db) == 4
    best = db.best(mod, target)
    assert best is not None and best.evidence.runs == 2 and best.evidence.samples == 3
    assert best.evidence.median == pytest.approx(1e-6) and best.evidence.confirmed
    # a fresh connection (another process would see the same) applies the best trace
    db2 = TuneFarmDatabase(Storage(any_url))
    sch = db2.query_schedule(mod, target, "main")
    assert sch is not None
    assert tvm_ffi.structural_equal(sch.mod, _candidate(mod, 4).mod)


def test_kernels_of_the_same_structure_with_other_block_names_are_other_workloads(
    any_url: str,
) -> None:
    """Structural equality ignores block names, but traces find blocks by name: GPT-2's
    ``add`` beside BERT's ``T_add`` in one team database made every search of the second
    model stop with a ScheduleError (its records were the first model's). They are two
    workloads, each with its own records; a foreign record already stored under a workload
    (a database written before) is skipped by the search, not fatal."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    db = TuneFarmDatabase(Storage(any_url), target)
    bert, gpt2 = matmul_mod(block="C"), matmul_mod(block="D")
    assert tvm_ffi.structural_equal(bert, gpt2) and shash_of(bert) == shash_of(gpt2)
    assert _measure(db, bert, _candidate(bert, 4), target, [1e-6])
    assert not db.has_workload(gpt2)
    assert db.get_top_k(db.commit_workload(gpt2), 4) == []
    assert _measure(db, gpt2, _candidate(gpt2, 8, "D"), target, [2e-6])
    fresh = TuneFarmDatabase(Storage(any_url), target)  # found again by names, from the rows
    assert fresh.workload_id(bert) != fresh.workload_id(gpt2)
    for mod, name, factor in ((bert, "C", 4), (gpt2, "D", 8)):
        (top,) = fresh.get_top_k(fresh.commit_workload(mod), 4)
        assert tvm_ffi.structural_equal(top.workload.mod, mod)
        sch = fresh.query_schedule(mod, target, "main")
        assert sch is not None
        assert tvm_ffi.structural_equal(sch.mod, _candidate(mod, factor, name).mod)
    # an old database's foreign record under BERT's workload: skipped by the search
    workload = fresh.commit_workload(bert)
    trace, _, _, args = TuningRecord(
        _candidate(gpt2, 2, "D").trace, workload, None, target, ArgInfo.from_prim_func(bert["main"])
    ).as_json()
    foreign = Measurement(
        workload=workload,
        candidate_hash="f" * 16,
        trace_json=trace,
        args_info_json=args,
        run_secs=[5e-7],
        target=target,
    )
    assert fresh.add(foreign)
    top = fresh.get_top_k(workload, 4)
    assert [float(r.run_secs[0]) for r in top] == pytest.approx([1e-6])


def test_failed_records_are_kept_but_never_chosen(any_url: str) -> None:
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    db = TuneFarmDatabase(Storage(any_url), target)
    mod = matmul_mod()
    _measure(db, mod, _candidate(mod, 2), target, None, error_kind="run_error", error_msg="boom")
    assert db.best(mod, target) is None
    assert db.get_top_k(db.commit_workload(mod), 5) == []
    counts = stats(db.storage)
    assert (counts["records"], counts["failed_records"], counts["workloads"]) == (1, 1, 1)


def test_invalid_run_times_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive finite"):
        Measurement(None, "x", [], [], [float("nan")], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive finite"):
        Measurement(None, "x", [], [], [-1.0], None)  # type: ignore[arg-type]


def test_lookup_is_target_aware(any_url: str) -> None:
    znver3 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    znver3_8 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 8})
    skylake = tvm.target.Target({"kind": "llvm", "mcpu": "skylake", "num-cores": 2})
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    db = TuneFarmDatabase(Storage(any_url))
    mod = matmul_mod()
    _measure(db, mod, _candidate(mod, 4), znver3, [1e-6])
    assert db.best(mod, znver3)[1] == "target"
    assert db.best(mod, znver3_8)[1] == "arch"
    assert db.best(mod, skylake)[1] == "kind"
    assert db.best(mod, cuda) is None  # never across target kinds
    assert db.query_tuning_record(mod, cuda, "main") is None


def test_bad_urls_give_one_line_errors(tmp_path) -> None:
    with pytest.raises(DatabaseError, match="unsupported database scheme"):
        Storage("mysql://u@h/db")
    with pytest.raises(DatabaseError, match="not a database URL"):
        Storage("::::")
    with pytest.raises(DatabaseError, match="does not exist"):
        Storage(f"sqlite:///{tmp_path}/nope/x.db")
    with pytest.raises(DatabaseError, match="does not exist"):
        Storage(f"sqlite:///{tmp_path}/missing.db", create=False)
    with pytest.raises(DatabaseError) as info:
        Storage("postgresql://alice:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in str(info.value) and "\n" not in str(info.value)
    assert redact("postgresql://alice:hunter2@h/db") == "postgresql://alice:***@h/db"


def test_newer_schema_is_refused(sqlite_url: str) -> None:
    from sqlalchemy import text

    storage = Storage(sqlite_url)
    with storage.transaction() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    with pytest.raises(DatabaseError, match="does not know: upgrade TuneFarm"):
        Storage(sqlite_url)


def test_records_hold_json_not_pickles(sqlite_url: str) -> None:
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    db = TuneFarmDatabase(Storage(sqlite_url), target)
    mod = matmul_mod()
    _measure(db, mod, _candidate(mod, 4), target, [1e-6], device="cpu x", worker="w:1")
    from database.models import RecordRow

    with db.storage.transaction() as s:
        row = s.query(RecordRow).one()
        assert json.loads(row.trace_json)[0][0][0] == "GetSBlock"
        assert json.loads(row.target_json)["kind"] == "llvm"
        assert (row.device, row.worker) == ("cpu x", "w:1")


def test_dropped_connection_is_retried(any_url: str) -> None:
    if not any_url.startswith("postgresql"):
        pytest.skip("server-side connection drop")
    from sqlalchemy import create_engine, text

    storage = Storage(any_url)
    pid = storage.run(lambda s: s.execute(text("SELECT pg_backend_pid()")).scalar())
    admin = create_engine(any_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:  # the server drops our pooled connection
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    admin.dispose()
    assert stats(storage)["records"] == 0  # retried on a fresh connection
    assert storage.run(lambda s: s.execute(text("SELECT pg_backend_pid()")).scalar()) != pid
