"""Import, export and merge keep every record on its own kernel (a multi-bucket database).

A database from a real tune of several kernels at two buckets goes through stock
MetaSchedule files and through a merge; each copy must hold every record on the source's
workload (same structure and block names), the same count per workload, and build the same
module. Two kernels of one structure with other block names stay two kernels.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from sqlalchemy import select
from tvm.s_tir.meta_schedule.database import JSONDatabase

from database import DatabaseError, Storage, TuneFarmDatabase
from database.models import GenericRun, RecordRow, WorkloadRow
from database.records import block_names, same_workload
from database.sharing import (
    GENERIC_FILE,
    INFO_FILE,
    export_metaschedule,
    export_pack,
    import_metaschedule,
    merge,
)
from tests.conftest import DATA, matmul_mod
from tests.database.test_database import _candidate, _measure

REPO = Path(__file__).resolve().parents[2]


def _records(url: str, *, valid_only: bool) -> dict[tuple[str, str], tvm.IRModule]:
    """Each schedule's (candidate hash, target) -> the workload module its records are on."""
    query = select(RecordRow.candidate_hash, RecordRow.target_key, WorkloadRow.mod_json).join(
        WorkloadRow
    )
    if valid_only:
        query = query.where(RecordRow.mean_sec.is_not(None))
    rows = Storage(url, create=False).run(lambda s: list(s.execute(query)), write=False)
    out: dict[tuple[str, str], tvm.IRModule] = {}
    mods: dict[str, tvm.IRModule] = {}
    for chash, tkey, mod_json in rows:
        if mod_json not in mods:
            mods[mod_json] = tvm.ir.load_json(mod_json)
        # a schedule may have several records (a confirmation, a re-measurement): all of
        # them on one workload
        assert out.setdefault((chash, tkey), mods[mod_json]) is mods[mod_json]
    return out


def _per_workload_counts(records: dict[tuple[str, str], tvm.IRModule]) -> list[int]:
    return sorted(Counter(id(mod) for mod in records.values()).values())


def _assert_same_records(source: str, copy: str, *, valid_only: bool) -> None:
    theirs = _records(source, valid_only=valid_only)
    ours = _records(copy, valid_only=valid_only)
    assert set(ours) == set(theirs)
    for key, mod in theirs.items():
        assert same_workload(ours[key], mod), f"record {key} moved to another kernel"
    assert _per_workload_counts(ours) == _per_workload_counts(theirs)


def _applied(url: str) -> tvm.IRModule:
    from tuner.compile import apply_database
    from tuner.model import load_model
    from tuner.targets import resolve_target

    target = resolve_target("llvm")
    db = TuneFarmDatabase(Storage(url, create=False))
    return apply_database(load_model(DATA / "dyn_kernels.py").mod, target, db)


@pytest.fixture(scope="module")
def source_build(dyn_tuned_db: str) -> tvm.IRModule:
    return _applied(dyn_tuned_db)


@pytest.mark.slow
def test_source_has_several_kernels_and_buckets(dyn_tuned_db: str) -> None:
    records = _records(dyn_tuned_db, valid_only=False)
    assert len(_per_workload_counts(records)) >= 6  # several kernels x two buckets


@pytest.mark.slow
def test_export_import_keeps_records_on_their_kernels(
    dyn_tuned_db: str, source_build: tvm.IRModule, any_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "ms"
    exported = export_metaschedule(Storage(dyn_tuned_db, create=False), out)
    # a bad line of the generic-run file: one error naming it, nothing stored
    good = (out / GENERIC_FILE).read_text()
    (out / GENERIC_FILE).write_text(good + '{"family_shash": "x", "bucket": {"n": 1.5}}\n')
    with pytest.raises(DatabaseError, match=rf"{GENERIC_FILE}:\d+: expected a generic run"):
        import_metaschedule(Storage(any_url), out)
    (out / GENERIC_FILE).write_text(good)
    done = import_metaschedule(Storage(any_url), out)
    assert done.added == done.records == exported.records
    _assert_same_records(dyn_tuned_db, any_url, valid_only=True)
    # the generic-code times come along (their own file): the copy builds the same dispatch
    assert _generic_runs(any_url) == _generic_runs(dyn_tuned_db) != []
    assert tvm_ffi.structural_equal(_applied(any_url), source_build)


def _generic_runs(url: str) -> list[tuple[str, str, str, float]]:
    query = select(
        GenericRun.family_shash, GenericRun.bucket_json, GenericRun.target_key, GenericRun.mean_sec
    )
    return sorted(Storage(url, create=False).run(lambda s: list(s.execute(query)), write=False))


@pytest.mark.slow
def test_merge_keeps_records_on_their_kernels(
    dyn_tuned_db: str, source_build: tvm.IRModule, any_url: str
) -> None:
    done = merge(Storage(any_url), dyn_tuned_db)
    assert done.added == done.records
    _assert_same_records(dyn_tuned_db, any_url, valid_only=False)
    assert tvm_ffi.structural_equal(_applied(any_url), source_build)
    # the generic-code times the build's dispatch weighs come along, once
    assert _generic_runs(any_url) == _generic_runs(dyn_tuned_db) != []
    merge(Storage(any_url), dyn_tuned_db)
    assert _generic_runs(any_url) == _generic_runs(dyn_tuned_db)


@pytest.mark.slow
def test_a_pack_builds_what_its_source_builds(
    dyn_tuned_db: str, source_build: tvm.IRModule, tmp_path: Path
) -> None:
    pack = tmp_path / "team.pack.db"
    export_pack(Storage(dyn_tuned_db, create=False), pack)
    url = f"sqlite:///{pack}"
    assert _generic_runs(url) == _generic_runs(dyn_tuned_db) != []
    assert tvm_ffi.structural_equal(_applied(url), source_build)


@pytest.mark.slow
def test_concurrent_imports_are_idempotent(dyn_tuned_db: str, any_url: str, tmp_path: Path) -> None:
    out = tmp_path / "ms"
    export_metaschedule(Storage(dyn_tuned_db, create=False), out)
    Storage(any_url).dispose()  # schema created once, before the race
    cmd = [sys.executable, "-m", "tuner.cli", "db", "import", str(out), "--db", any_url]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(4)
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    _assert_same_records(dyn_tuned_db, any_url, valid_only=True)


def _twins(url: str) -> list[tuple[tvm.IRModule, str, int]]:
    """A database holding two kernels of one structure whose blocks have other names (BERT's
    ``T_add`` and GPT-2's ``add``), each with its own record, task name and bucket family."""
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    db = TuneFarmDatabase(Storage(url), target)
    twins = [(matmul_mod(block="C"), "C", 4), (matmul_mod(block="D"), "D", 8)]
    for n, (mod, name, factor) in enumerate(twins):
        db.workload_id(
            mod, create=True, task_name=f"kernel_{name}", family=(f"{n:016x}", {"s": 16})
        )
        assert _measure(db, mod, _candidate(mod, factor, name), target, [(n + 1) * 1e-6])
    return twins


def _assert_twins_apart(
    url: str, twins: list[tuple[tvm.IRModule, str, int]], *, labelled: bool = True
) -> None:
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    db = TuneFarmDatabase(Storage(url, create=False), target)
    for mod, name, factor in twins:
        sch = db.query_schedule(mod, target, "main")
        assert sch is not None, f"kernel {name} lost its record"
        assert tvm_ffi.structural_equal(sch.mod, _candidate(mod, factor, name).mod)
    rows = Storage(url, create=False).run(
        lambda s: sorted(s.execute(select(WorkloadRow.task_name, WorkloadRow.family_shash))),
        write=False,
    )
    if labelled:
        assert rows == [("kernel_C", f"{0:016x}"), ("kernel_D", f"{1:016x}")]


def test_export_keeps_kernels_of_one_structure_apart(any_url: str, tmp_path: Path) -> None:
    """Stock JSONDatabase's commit_workload folds structurally equal modules into one, which put
    the second kernel's records on the first's workload (export failed with a ScheduleError).
    Each workload is its own line; stock loads both and replays each record on its own."""
    source = f"sqlite:///{tmp_path / 'twins.db'}"
    twins = _twins(source)
    out = tmp_path / "ms"
    assert export_metaschedule(Storage(source, create=False), out).workloads == 2
    # stock loads each line as a workload and replays every record on its own (or raises)
    stock = JSONDatabase(
        str(out / "database_workload.json"), str(out / "database_tuning_record.json")
    )
    assert sorted(block_names(r.workload.mod) for r in stock.get_all_tuning_records()) == [
        ("root", "C"),
        ("root", "D"),
    ]
    done = import_metaschedule(Storage(any_url), out)
    assert (done.workloads, done.records, done.added) == (2, 2, 2)
    _assert_twins_apart(any_url, twins)
    # an export written before the info file had line numbers: labels found by hash
    old = [json.loads(line) for line in (out / INFO_FILE).read_text().splitlines()]
    (out / INFO_FILE).write_text(
        "".join(json.dumps({k: v for k, v in e.items() if k != "index"}) + "\n" for e in old)
    )
    older = f"sqlite:///{tmp_path / 'older.db'}"
    assert import_metaschedule(Storage(older), out).added == 2
    _assert_twins_apart(older, twins, labelled=False)


def test_merge_keeps_kernels_of_one_structure_apart(any_url: str, tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'twins.db'}"
    twins = _twins(source)
    done = merge(Storage(any_url), source)
    assert (done.workloads, done.added) == (2, 2)
    _assert_twins_apart(any_url, twins)
