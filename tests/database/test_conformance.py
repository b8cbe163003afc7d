"""MetaSchedule's ``Database`` contract, run alike on stock databases and on TuneFarm's.

One suite, four backends side by side: stock ``MemoryDatabase`` and ``JSONDatabase`` (the
reference behaviour) and ``TuneFarmDatabase`` on SQLite and on PostgreSQL (a fresh database,
dropped after). Every assertion holds for all four: every commit is a record; ``get_top_k``
ranks the records of a workload by the mean of their run times as committed, a zero counts,
and a record without a run time other than stock's 1e10 s stub, or without a schedule
instruction, is never returned. Where TuneFarm's own choice of a best differs (its
``query_tuning_record`` takes the schedule with the lowest median over all its records, on the
query's target), the cases here are ones where both rules agree, and
``tests/database/test_evidence.py`` tests TuneFarm's rule; docs/database.md lists the
differences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import Database, TuningRecord

from database import Storage, TuneFarmDatabase
from tests.conftest import matmul_mod, pg_database

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[], Database]  # a new instance on the same storage
    persistent: bool  # a second instance sees what the first wrote

    @property
    def stock(self) -> bool:
        return self.name in ("memory", "json")


@pytest.fixture(
    params=["memory", "json", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name = request.param
    if name == "memory":
        db = ms.database.MemoryDatabase()
        yield Backend(name, lambda: db, persistent=True)
    elif name == "json":
        yield Backend(name, lambda: ms.database.JSONDatabase(work_dir=str(tmp_path)), True)
    elif name == "sqlite":
        url = f"sqlite:///{tmp_path / 'tf.db'}"
        yield Backend(name, lambda: TuneFarmDatabase(Storage(url)), persistent=True)
    else:
        url = request.getfixturevalue("pg_url")
        yield Backend(name, lambda: TuneFarmDatabase(Storage(url)), persistent=True)


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_database() as url:
        yield url


def _candidate(mod: tvm.IRModule, loop: int, factor: int) -> tvm.s_tir.Schedule:
    sch = tvm.s_tir.Schedule(mod)
    loops = sch.get_loops(sch.get_sblock("C"))
    sch.split(loops[loop], [None, factor])
    return sch


def _record(workload, sch: tvm.s_tir.Schedule, secs: list[float] | None) -> TuningRecord:
    args = ArgInfo.from_prim_func(workload.mod["main"])
    return TuningRecord(sch.trace, workload, secs, TARGET, args)


def _secs(record: TuningRecord) -> list[float] | None:
    return None if record.run_secs is None else [float(s) for s in record.run_secs]


# Seven distinct candidates with every kind of run time a runner may report.
RUNS: list[tuple[int, int, list[float] | None]] = [
    (0, 2, None),  # no result
    (0, 4, []),  # empty
    (0, 8, [1e10]),  # stock's failed run
    (1, 2, [0.0, 0.002]),  # a runner reported zero
    (1, 4, [3e-6]),
    (1, 8, [1e-6, 1e-6]),
    (0, 16, [2e-6]),
]


def _fill(db: Database, mod: tvm.IRModule):
    workload = db.commit_workload(mod)
    for loop, factor, secs in RUNS:
        db.commit_tuning_record(_record(workload, _candidate(mod, loop, factor), secs))
    return workload


def test_workload_identity(backend: Backend) -> None:
    db = backend.open()
    mod, other = matmul_mod(), matmul_mod(16, 16, 8)
    assert not db.has_workload(mod)
    first = db.commit_workload(mod)
    again = db.commit_workload(matmul_mod())  # an equal module, another object
    assert tvm_ffi.structural_equal(first.mod, mod)
    assert tvm_ffi.structural_equal(again.mod, first.mod)
    assert db.has_workload(mod) and not db.has_workload(other)
    db.commit_workload(other)
    assert db.has_workload(other)


def test_round_trip_and_reload(backend: Backend) -> None:
    db = backend.open()
    mod = matmul_mod()
    workload = db.commit_workload(mod)
    sch = _candidate(mod, 1, 8)
    db.commit_tuning_record(_record(workload, sch, [1e-6, 2e-6]))
    (got,) = db.get_top_k(workload, 1)
    assert _secs(got) == pytest.approx([1e-6, 2e-6])
    assert tvm_ffi.structural_equal(got.trace.as_json(), sch.trace.as_json())
    assert tvm_ffi.structural_equal(got.workload.mod, mod)
    if not backend.persistent:
        return
    reopened = backend.open()
    assert reopened.has_workload(mod)
    (again,) = reopened.get_top_k(reopened.commit_workload(mod), 5)
    assert _secs(again) == pytest.approx([1e-6, 2e-6])
    sch2 = reopened.query(mod, TARGET, kind="schedule")
    assert tvm_ffi.structural_equal(sch2.mod, sch.mod)


def test_top_k_order_with_failed_empty_and_zero_run_times(backend: Backend) -> None:
    db = backend.open()
    workload = _fill(db, matmul_mod())  # never raises, whatever the runner reported
    assert len(db) == len(RUNS)  # every committed record counts, failed ones too
    top = [_secs(r) for r in db.get_top_k(workload, 10)]
    # fastest mean first; None, [] and 1e10 are never returned; a zero is ranked by its mean
    assert top == [
        pytest.approx([1e-6, 1e-6]),
        pytest.approx([2e-6]),
        pytest.approx([3e-6]),
        pytest.approx([0.0, 0.002]),
    ]
    assert [_secs(r) for r in db.get_top_k(workload, 2)] == top[:2]
    assert db.get_top_k(workload, 0) == []


def test_query_kinds(backend: Backend) -> None:
    db = backend.open()
    mod = matmul_mod()
    _fill(db, mod)
    best = _candidate(mod, 1, 8)
    record = db.query(mod, TARGET, kind="record")
    assert isinstance(record, TuningRecord) and _secs(record) == pytest.approx([1e-6, 1e-6])
    sch = db.query(mod, TARGET, kind="schedule")
    assert isinstance(sch, tvm.s_tir.Schedule)
    assert tvm_ffi.structural_equal(sch.mod, best.mod)
    applied = db.query(mod, TARGET, kind="ir_module")
    assert isinstance(applied, tvm.IRModule)
    assert tvm_ffi.structural_equal(applied, best.mod)
    assert db.query(matmul_mod(8, 8, 8), TARGET, kind="record") is None


def test_composition_in_stock_unions(backend: Backend) -> None:
    db = backend.open()
    mod = matmul_mod()
    _fill(db, mod)  # best here: 1e-6
    faster = ms.database.MemoryDatabase()
    workload = faster.commit_workload(mod)
    quick = _candidate(mod, 0, 2)
    faster.commit_tuning_record(_record(workload, quick, [5e-7]))
    union = ms.database.UnionDatabase(db, faster)
    assert _secs(union.query(mod, TARGET, kind="record")) == pytest.approx([5e-7])
    ordered = ms.database.OrderedUnionDatabase(db, faster)
    assert _secs(ordered.query(mod, TARGET, kind="record")) == pytest.approx([1e-6, 1e-6])
    reverse = ms.database.OrderedUnionDatabase(faster, db)
    assert _secs(reverse.query(mod, TARGET, kind="record")) == pytest.approx([5e-7])


def test_current_and_len(backend: Backend) -> None:
    db = backend.open()
    assert len(db) == 0
    assert Database.current() is None
    with db:
        current = Database.current()
        assert current is not None and current.same_as(db)
        _fill(current, matmul_mod())
    assert Database.current() is None
    assert len(db) == len(RUNS)


def _commit_all(db: Database, mod: tvm.IRModule, sch, runs: list[list[float] | None]):
    workload = db.commit_workload(mod)
    for secs in runs:
        db.commit_tuning_record(_record(workload, sch, secs))
    return workload


def test_every_commit_of_one_trace_is_a_record_ranked_by_its_mean(backend: Backend) -> None:
    """Re-measurements of one schedule are records of their own, ranked by their means."""
    db = backend.open()
    mod = matmul_mod()
    runs = [[6e-6, 7e-6], [2e-6, 3e-6, 4e-6], [5e-6], [1.5e-6, 1.5e-6, 9e-5], [3.5e-6]]
    workload = _commit_all(db, mod, _candidate(mod, 1, 4), runs)
    assert len(db) == len(runs)
    top = [_secs(r) for r in db.get_top_k(workload, 3)]
    assert top == [
        pytest.approx([2e-6, 3e-6, 4e-6]),
        pytest.approx([3.5e-6]),
        pytest.approx([5e-6]),
    ]
    everything = sorted(_secs(r) for r in db.get_top_k(workload, 100))
    assert [pytest.approx(r) for r in sorted(runs)] == everything


def test_zero_counts_and_stub_or_missing_run_times_never_rank(backend: Backend) -> None:
    """A zero is a time; a record whose run times are missing, empty or only the 1e10 s stub
    is kept (``len``) and never ranked; a stub beside a real time is ranked by the mean."""
    db = backend.open()
    mod = matmul_mod()
    runs = [[2.5, 3.5], [], [0.0, 1.0], None, [1.0], [4.0, 1e10], [1e10], [1e10, 1e10]]
    workload = _commit_all(db, mod, _candidate(mod, 0, 8), runs)
    assert len(db) == len(runs)
    expected = [[0.0, 1.0], [1.0], [2.5, 3.5], [4.0, 1e10]]
    assert [_secs(r) for r in db.get_top_k(workload, 10)] == expected
    assert [_secs(r) for r in db.get_top_k(workload, 1)] == expected[:1]
    assert db.get_top_k(workload, 0) == []


def test_a_record_committed_twice_is_two_records(backend: Backend) -> None:
    db = backend.open()
    mod = matmul_mod()
    workload = _commit_all(db, mod, _candidate(mod, 1, 2), [[4e-6], [4e-6]])
    assert len(db) == 2
    assert [_secs(r) for r in db.get_top_k(workload, 5)] == [pytest.approx([4e-6])] * 2


def test_a_trace_without_schedule_instructions_never_ranks(backend: Backend) -> None:
    """The untuned default (an empty trace) is not a valid record for ``get_top_k``."""
    db = backend.open()
    mod = matmul_mod()
    workload = db.commit_workload(mod)
    db.commit_tuning_record(_record(workload, tvm.s_tir.Schedule(mod), [1e-7]))
    db.commit_tuning_record(_record(workload, _candidate(mod, 1, 2), [5e-6]))
    assert [_secs(r) for r in db.get_top_k(workload, 5)] == [pytest.approx([5e-6])]
    assert len(db) == 2


def test_all_records_in_commit_order(backend: Backend) -> None:
    db = backend.open()
    mod = matmul_mod()
    _fill(db, mod)
    got = [_secs(r) for r in db.get_all_tuning_records()]
    want = [None if secs is None else [float(s) for s in secs] for _, _, secs in RUNS]
    if backend.name == "json":
        assert sorted(map(str, got)) == sorted(map(str, want))  # JSONDatabase: by mean
    else:
        assert got == want


def test_query_takes_the_fastest_of_single_runs(backend: Backend) -> None:
    """Each schedule timed once with one sample: the fastest mean is the fastest median, so
    stock's rule and TuneFarm's pick the same record."""
    db = backend.open()
    mod = matmul_mod()
    workload = db.commit_workload(mod)
    for (loop, factor), secs in zip(((0, 2), (1, 4), (0, 4)), (3e-6, 1e-6, 2e-6), strict=True):
        db.commit_tuning_record(_record(workload, _candidate(mod, loop, factor), [secs]))
    record = db.query_tuning_record(mod, TARGET, "main")
    assert record is not None and _secs(record) == pytest.approx([1e-6])
    assert tvm_ffi.structural_equal(
        db.query_ir_module(mod, TARGET, "main"), _candidate(mod, 1, 4).mod
    )
    assert db.query_tuning_record(matmul_mod(8, 8, 8), TARGET, "main") is None
