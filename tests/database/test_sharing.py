"""Sharing schedules: stock MetaSchedule files both ways, merging teammates, packs, pruning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tvm
from typer.testing import CliRunner

from database import DatabaseError, Storage
from database.jobs import start_job
from database.queries import best_records, stats
from database.sharing import export_metaschedule, export_pack, import_metaschedule, merge, prune
from tests.conftest import TINY
from tuner.cli import app


def _best(url: str) -> list[tuple[str, float]]:
    return sorted((r["target_kind"], r["mean_sec"]) for r in best_records(Storage(url)))


@pytest.mark.slow
def test_export_is_loaded_and_applied_by_stock_metaschedule(tuned_db, tmp_path: Path) -> None:
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tuner.model import load_model
    from tuner.pipeline import prepare
    from tuner.targets import resolve_target

    out = tmp_path / "ms"
    done = export_metaschedule(Storage(tuned_db.url, create=False), out)
    assert done.records == stats(Storage(tuned_db.url))["valid_records"] > 0
    stock = ms.database.JSONDatabase(
        str(out / "database_workload.json"), str(out / "database_tuning_record.json")
    )
    assert len(stock) == done.records
    target = resolve_target("llvm")
    prepared = prepare(load_model(TINY).mod, target)
    with target, stock, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(prepared)
    scheduled = [
        f
        for f in applied.functions.values()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and f.attrs.get("tirx.is_scheduled")
    ]
    assert scheduled, "stock MetaSchedule applied none of the exported schedules"


@pytest.mark.slow
def test_import_round_trip_and_bad_lines_store_nothing(
    tuned_db, any_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "ms"
    export_metaschedule(Storage(tuned_db.url, create=False), out)
    done = import_metaschedule(Storage(any_url), out)
    assert done.added == done.records > 0
    assert _best(any_url) == _best(tuned_db.url)
    assert import_metaschedule(Storage(any_url), out).added == 0  # idempotent
    before = stats(Storage(any_url))

    records = (out / "database_tuning_record.json").read_text().splitlines()
    index, (trace, _secs, target, args) = json.loads(records[0])

    def line(secs: object, idx: int = index) -> str:
        return json.dumps([idx, [trace, secs, target, args]])

    bad_cases = [  # a good line first: nothing may land when a later line is bad
        ("not valid JSON", [records[0], "[0, [[[], []], [1e-5"]),
        ("positive and finite", [records[0], line([-1.0])]),
        ("positive and finite", [records[0], line([float("nan")])]),
        ("empty or missing run times", [records[0], line([])]),
        ("out of range", [records[0], line([1e-5], idx=7)]),
    ]
    for n, (message, lines) in enumerate(bad_cases):
        bad = tmp_path / f"bad-{n}"
        bad.mkdir()
        (bad / "database_workload.json").write_text((out / "database_workload.json").read_text())
        (bad / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
        with pytest.raises(DatabaseError, match=message):
            import_metaschedule(Storage(any_url), bad)
        result = CliRunner().invoke(app, ["db", "import", str(bad), "--db", any_url])
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert stats(Storage(any_url)) == before  # nothing half-written


@pytest.mark.slow
def test_merge_keeps_provenance_and_adds_each_record_once(tuned_db, any_url: str) -> None:
    mine = Storage(any_url)
    first = merge(mine, tuned_db.url)
    assert first.added == first.records == stats(Storage(tuned_db.url))["records"]
    assert merge(mine, tuned_db.url).added == 0
    assert stats(mine)["records"] == first.records
    theirs = {
        (r["mean_sec"], r["device"], r["worker"]) for r in best_records(Storage(tuned_db.url))
    }
    ours = {(r["mean_sec"], r["device"], r["worker"]) for r in best_records(mine)}
    assert ours == theirs and all(d for _, d, _ in ours)
    jobs = stats(mine)["jobs"]
    assert jobs == 1  # the teammate's job, copied once
    with pytest.raises(DatabaseError, match="into itself"):
        merge(mine, any_url)


@pytest.mark.slow
def test_pack_is_read_only_and_builds_offline(tuned_db, tmp_path: Path) -> None:
    from tuner.compile import compile as tf_compile
    from tuner.model import load_model
    from tuner.targets import resolve_target

    pack = tmp_path / "team.pack.db"
    done = export_pack(Storage(tuned_db.url, create=False), pack)
    # the pack holds each best schedule with all its records (a confirmation is one more)
    pack_stats = stats(Storage(f"sqlite:///{pack}", create=False))
    assert pack_stats["schedules"] == len(best_records(Storage(tuned_db.url)))
    assert pack_stats["records"] == done.records
    assert not os.stat(pack).st_mode & 0o222 and not Path(f"{pack}-wal").exists()
    _ex, report = tf_compile(
        load_model(TINY).mod, resolve_target("llvm"), f"sqlite:///{pack}", strict=True
    )
    assert report.tuned_share == 1.0
    # writing into a pack is a one-line error, and the pack is unchanged
    result = CliRunner().invoke(
        app, ["tune", str(TINY), "--trials", "2", "--db", f"sqlite:///{pack}"]
    )
    assert result.exit_code == 1 and "read-only" in result.output, result.output
    assert stats(Storage(f"sqlite:///{pack}", create=False))["records"] == done.records
    with pytest.raises(DatabaseError, match="exists"):
        export_pack(Storage(tuned_db.url), pack)


@pytest.mark.slow
def test_prune_keeps_the_best(tuned_db, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    merge(Storage(url), tuned_db.url)
    best = _best(url)
    plan = prune(Storage(url), keep_top=1, failed=True, dry_run=True)
    assert plan.total > 0 and stats(Storage(url))["records"] > len(best)
    prune(Storage(url), keep_top=1, failed=True)
    # the best schedules stay, each with every record of its evidence
    assert stats(Storage(url))["schedules"] == len(best) and _best(url) == best
    result = CliRunner().invoke(app, ["db", "prune", "--db", url])
    assert result.exit_code == 1 and "nothing to prune" in result.output


def test_bad_urls_are_one_line_errors(tmp_path: Path) -> None:
    for url, message in (
        ("mysql://root@127.0.0.1/test", "unsupported database scheme"),
        ("postgresql://postgres:s3cret@127.0.0.1:1/x", "cannot open"),
        (f"sqlite:///{tmp_path}/missing.db", "does not exist"),
    ):
        result = CliRunner().invoke(app, ["db", "stats", "--db", url])
        assert result.exit_code == 1, result.output
        assert message in result.output and "s3cret" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.slow
def test_read_only_role_builds_from_postgres(tuned_db, any_url: str) -> None:
    if not any_url.startswith("postgresql"):
        pytest.skip("a PostgreSQL role")
    import uuid

    from sqlalchemy import create_engine, text

    from tuner.compile import compile as tf_compile
    from tuner.model import load_model
    from tuner.targets import resolve_target

    merge(Storage(any_url), tuned_db.url)
    role = f"tf_ro_{uuid.uuid4().hex[:8]}"
    dbname = any_url.rsplit("/", 1)[1]
    admin = create_engine(any_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{role}"'))
        conn.execute(text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
        conn.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"'))
    try:
        host = any_url.split("@", 1)[1]
        ro_url = f"postgresql://{role}@{host}"
        _ex, report = tf_compile(load_model(TINY).mod, resolve_target("llvm"), ro_url, strict=True)
        assert report.tuned_share == 1.0
        with pytest.raises(DatabaseError, match="permission denied") as info:
            start_job(Storage(ro_url, create=False), name="x", target_json="{}", budget=1)
        assert "\n" not in str(info.value)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()
