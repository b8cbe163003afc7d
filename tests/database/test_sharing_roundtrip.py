"""Import, export and merge keep every record on its own kernel (a multi-bucket database).

A database from a real tune of several kernels at two buckets goes through stock
MetaSchedule files and through a merge; each copy must hold every record on a workload
structurally equal to the source's, the same count per workload, and build the same module.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import tvm
import tvm_ffi
from sqlalchemy import select

from database import Storage, TuneFarmDatabase
from database.models import RecordRow, WorkloadRow
from database.sharing import export_metaschedule, import_metaschedule, merge
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[2]


def _records(url: str, *, valid_only: bool) -> dict[tuple[str, str], tvm.IRModule]:
    """Each record's (candidate hash, target) -> its workload's module."""
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
        assert (chash, tkey) not in out
        out[(chash, tkey)] = mods[mod_json]
    return out


def _per_workload_counts(records: dict[tuple[str, str], tvm.IRModule]) -> list[int]:
    return sorted(Counter(id(mod) for mod in records.values()).values())


def _assert_same_records(source: str, copy: str, *, valid_only: bool) -> None:
    theirs = _records(source, valid_only=valid_only)
    ours = _records(copy, valid_only=valid_only)
    assert set(ours) == set(theirs)
    for key, mod in theirs.items():
        assert tvm_ffi.structural_equal(ours[key], mod), f"record {key} moved to another kernel"
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


def test_source_has_several_kernels_and_buckets(dyn_tuned_db: str) -> None:
    records = _records(dyn_tuned_db, valid_only=False)
    assert len(_per_workload_counts(records)) >= 6  # several kernels x two buckets


def test_export_import_keeps_records_on_their_kernels(
    dyn_tuned_db: str, source_build: tvm.IRModule, any_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "ms"
    exported = export_metaschedule(Storage(dyn_tuned_db, create=False), out)
    done = import_metaschedule(Storage(any_url), out)
    assert done.added == done.records == exported.records
    _assert_same_records(dyn_tuned_db, any_url, valid_only=True)
    assert tvm_ffi.structural_equal(_applied(any_url), source_build)


def test_merge_keeps_records_on_their_kernels(
    dyn_tuned_db: str, source_build: tvm.IRModule, any_url: str
) -> None:
    done = merge(Storage(any_url), dyn_tuned_db)
    assert done.added == done.records
    _assert_same_records(dyn_tuned_db, any_url, valid_only=False)
    assert tvm_ffi.structural_equal(_applied(any_url), source_build)


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
