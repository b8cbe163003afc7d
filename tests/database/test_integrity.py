"""`db check` finds records on the wrong kernel, moves them back or quarantines them."""

from __future__ import annotations

import json

import pytest
import tvm
from sqlalchemy import select, update
from tvm import te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import TuningRecord
from typer.testing import CliRunner

from database import Measurement, Storage, TuneFarmDatabase, shash_of
from database.integrity import check
from database.models import RecordRow
from tests.conftest import matmul_mod
from tuner.cli import app
from tuner.pipeline import normalize

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _other_mod() -> tvm.IRModule:
    """A kernel whose block is named differently: a trace of ``matmul_mod`` cannot apply."""
    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    r = te.reduce_axis((0, 16), name="k")
    d = te.compute((16, 16), lambda i, j: te.sum(a[i, r] * b[j, r], axis=r), name="D")
    return normalize(te.create_prim_func([a, b, d]))


def _add(db: TuneFarmDatabase, mod: tvm.IRModule, block: str, factor: int, sec: float) -> None:
    sch = tvm.s_tir.Schedule(mod)
    sch.split(sch.get_loops(sch.get_sblock(block))[0], [None, factor])
    workload = db.commit_workload(mod)
    trace, _, _, args = TuningRecord(
        sch.trace, workload, None, TARGET, ArgInfo.from_prim_func(mod["main"])
    ).as_json()
    db.add(Measurement(workload, shash_of(sch.mod), trace, args, [sec], TARGET))


@pytest.fixture
def damaged(any_url: str) -> tuple[str, int, int]:
    """Two kernels; the fastest record of the first moved onto the second (as the old merge did),
    and one record whose candidate no stored workload gives. Returns (url, moved id, odd id)."""
    db = TuneFarmDatabase(Storage(any_url))
    first, second = matmul_mod(), _other_mod()
    for factor, sec in ((2, 3e-6), (4, 1e-7), (8, 2e-6)):
        _add(db, first, "C", factor, sec)
    for factor, sec in ((2, 5e-6), (4, 4e-6)):
        _add(db, second, "D", factor, sec)
    first_id, second_id = db.workload_id(first), db.workload_id(second)

    def damage(session) -> tuple[int, int]:
        fastest = session.scalar(select(RecordRow.id).where(RecordRow.mean_sec == 1e-7))
        session.execute(
            update(RecordRow).where(RecordRow.id == fastest).values(workload_id=second_id)
        )
        odd = session.scalar(select(RecordRow.id).where(RecordRow.workload_id == first_id).limit(1))
        session.execute(
            update(RecordRow).where(RecordRow.id == odd).values(candidate_hash="0" * 16)
        )
        return fastest, odd

    moved, odd = db.storage.run(damage)
    return any_url, moved, odd


def test_build_lookup_skips_a_record_whose_trace_does_not_apply(damaged) -> None:
    url, _moved, _odd = damaged
    db = TuneFarmDatabase(Storage(url, create=False))
    found = db.best(_other_mod(), TARGET)
    assert found is not None and found[2] == pytest.approx(4e-6)  # not the foreign 1e-7
    sch = db.query_schedule(_other_mod(), TARGET, "main")
    assert sch is not None


def test_check_finds_and_fix_repairs(damaged) -> None:
    url, moved, odd = damaged
    storage = Storage(url, create=False)
    report = check(storage)
    assert {m.record_id: m.action for m in report.misplaced} == {
        moved: f"move to workload {TuneFarmDatabase(storage).workload_id(matmul_mod())}",
        odd: "quarantine (no stored workload matches)",
    }
    fixed = check(storage, fix=True)
    assert (fixed.moved, fixed.deleted, fixed.quarantined) == (1, 0, 1)
    assert check(storage).misplaced == ()
    db = TuneFarmDatabase(storage)
    assert db.best(matmul_mod(), TARGET)[2] == pytest.approx(1e-7)  # back on its kernel
    assert len(db) == 5  # nothing lost: the odd record is kept as a failed one
    row = storage.run(lambda s: s.get(RecordRow, odd), write=False)
    assert row.error_kind == "misplaced" and row.mean_sec is None and json.loads(row.run_secs_json)


def test_cli_check_exit_codes(damaged) -> None:
    url, _moved, _odd = damaged
    runner = CliRunner()
    found = runner.invoke(app, ["db", "check", "--db", url, "--json"])
    assert found.exit_code == 1 and "db check --fix" in found.output
    fixed = runner.invoke(app, ["db", "check", "--db", url, "--fix", "--json"])
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(fixed.output)["moved"] == 1
    clean = runner.invoke(app, ["db", "check", "--db", url])
    assert clean.exit_code == 0 and "0 misplaced" in clean.output
