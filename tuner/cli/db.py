"""``tunefarm db ...``: inspect, share and maintain the schedule database."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from database.storage import Storage, redact
from tuner.cli.common import DbOpt, check_range, console, open_storage, user_errors
from tuner.errors import TuneFarmError
from tuner.progress import fmt_sec

db_app = typer.Typer(
    help="Inspect, share and maintain the schedule database.", no_args_is_help=True
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
JsonSummaryOpt = Annotated[
    bool, typer.Option("--json", help="Print what was done as one JSON object.")
]
TaskOpt = Annotated[
    str | None, typer.Option("--task", help="Only workloads whose task name contains this.")
]


class ExportFormat(str, Enum):
    metaschedule = "metaschedule"
    sqlite = "sqlite"


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col in ("id", "records", "valid") else "left")
    for row in rows:
        table.add_row(*["-" if v is None else str(v) for v in row])
    console.print(table)


@db_app.command("stats")
@user_errors
def db_stats(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Counts of workloads, schedules, tuning records (valid and failed), jobs and targets."""
    from database.queries import stats

    data = stats(open_storage(db, create=False))
    if as_json:
        print(json.dumps(data))
        return
    keys = [
        "workloads",
        "schedules",
        "records",
        "valid_records",
        "failed_records",
        "jobs",
        "targets",
    ]
    _table("schedule database", ["what", "count"], [[k.replace("_", " "), data[k]] for k in keys])


@db_app.command("list")
@user_errors
def db_list(
    db: DbOpt = None,
    jobs: Annotated[bool, typer.Option("--jobs", help="List jobs instead of workloads.")] = False,
    task: TaskOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Workloads (task, bucket, records, fastest time, whether the latest job that tuned it
    converged and the gain it still expected) or, with --jobs, tuning jobs."""
    from database.queries import list_jobs, list_workloads
    from tuner.cli.render import convergence

    storage = open_storage(db, create=False)
    if jobs:
        data = list_jobs(storage)
        if as_json:
            print(json.dumps(data))
            return
        cols = ["id", "name", "status", "trials_done", "budget", "submitted_by", "started_at"]
        _table("jobs", cols, [[j[c] for c in cols] for j in data])
        return
    data = list_workloads(storage, task=task)
    if as_json:
        print(json.dumps(data))
        return
    rows = [
        [
            w["id"],
            w["task"],
            _bucket(w["bucket"]),
            w["records"],
            w["valid"],
            fmt_sec(w["best_sec"]) if w["best_sec"] else None,
            w["targets"],
            convergence(w["converged"], w["expected_gain"]),
        ]
        for w in data
    ]
    cols = ["id", "task", "bucket", "records", "valid", "best", "targets", "converged"]
    _table("workloads", cols, rows)


def _bucket(bucket: dict[str, int] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in bucket.items()) if bucket else None


@db_app.command("best")
@user_errors
def db_best(
    db: DbOpt = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="Only this target kind (llvm, cuda, ...).")
    ] = None,
    task: TaskOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The best schedule of every (workload, target), with its evidence and where it was
    measured.

    The best is the schedule with the lowest median over the run times of all its records.
    --json gives per kernel ``runs`` (timed runs pooled), ``samples``, ``median`` (seconds),
    ``spread`` (IQR / median) and ``confirmed`` (timed in more than one run)."""
    from database.queries import best_records

    data = best_records(open_storage(db, create=False), target_kind=kind, task=task)
    if as_json:
        print(json.dumps(data))
        return
    rows = [
        [
            r["workload_id"],
            r["task"],
            _bucket(r["bucket"]),
            f"{r['target_kind']}/{r['target_arch'] or '-'}",
            fmt_sec(r["median"]),
            f"{100 * r['spread']:.0f}%" if r["spread"] is not None else None,
            f"{r['runs']}{' ✓' if r['confirmed'] else ''}",
            f"{r['gflops']:.1f}" if r["gflops"] else None,
            (r["device"] or "")[:40] or None,
            r["job_id"],
        ]
        for r in data
    ]
    cols = ["id", "task", "bucket", "target", "median", "spread", "runs", "GFLOPS", "device", "job"]
    _table("best records", cols, rows)


@db_app.command("export")
@user_errors
def db_export(
    dest: Annotated[Path, typer.Argument(help="Folder (metaschedule) or file (sqlite).")],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="metaschedule: stock JSONDatabase files; sqlite: a read-only schedule pack "
            "of the best records.",
        ),
    ] = ExportFormat.metaschedule,
    best_only: Annotated[
        bool,
        typer.Option(
            "--best-only",
            help="metaschedule: only the best per target (a sqlite pack always is).",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace DEST's export (the pack file, or the folder's two files)."
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Export schedules for stock MetaSchedule or as an offline schedule pack."""
    from database.sharing import export_metaschedule, export_pack

    if fmt is ExportFormat.metaschedule and dest.exists() and not dest.is_dir():
        raise TuneFarmError(
            f"{dest} is a file: --format metaschedule needs a folder "
            "(or use --format sqlite for a schedule pack file)"
        )
    if fmt is ExportFormat.sqlite and dest.is_dir():
        raise TuneFarmError(f"{dest} is a directory: --format sqlite writes a file")
    if fmt is ExportFormat.sqlite and best_only:
        raise TuneFarmError(
            "--best-only applies to --format metaschedule: a sqlite pack holds only the best "
            "records already"
        )
    storage = open_storage(db, create=False)
    if fmt is ExportFormat.metaschedule:
        done = export_metaschedule(storage, dest, best_only=best_only, force=force)
    else:
        done = export_pack(storage, dest, force=force)
    if as_json:
        print(json.dumps({**done.to_dict(), "format": fmt.value, "dest": str(dest)}))
    elif fmt is ExportFormat.metaschedule:
        console.print(f"wrote {done.records} records of {done.workloads} workloads to {dest}/")
    else:
        console.print(
            f"wrote a read-only pack of {done.records} best records ({done.workloads} "
            f"workloads) to {dest}; build with --db sqlite:///{dest}"
        )


@db_app.command("import")
@user_errors
def db_import(
    src: Annotated[Path, typer.Argument(help="A MetaSchedule work_dir (database_*.json files).")],
    db: DbOpt = None,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Import a stock MetaSchedule database; all of it or (on any bad line) none of it."""
    from database.sharing import import_metaschedule

    done = import_metaschedule(open_storage(db), src)
    if as_json:
        print(json.dumps(done.to_dict()))
        return
    console.print(
        f"read {done.records} records of {done.workloads} workloads; {done.added} new, "
        f"{done.records - done.added} already present"
    )


@db_app.command("merge")
@user_errors
def db_merge(
    other: Annotated[str, typer.Argument(help="URL of the database to fold in.")],
    db: DbOpt = None,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Fold a teammate's database in, keeping every record's provenance."""
    from database.sharing import merge

    done = merge(open_storage(db), other)
    if as_json:
        print(json.dumps(done.to_dict()))
        return
    console.print(
        f"merged {redact(other)}: {done.added} new records "
        f"({done.records - done.added} already present) over {done.workloads} workloads"
    )


@db_app.command("prune")
@user_errors
def db_prune(
    db: DbOpt = None,
    keep_top: Annotated[
        int | None,
        typer.Option("--keep-top", help="Keep the best K per (workload, target, device)."),
    ] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Delete failed candidates.")] = False,
    older_than: Annotated[
        float | None,
        typer.Option("--older-than", help="Delete non-best records older than DAYS."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count.")] = False,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Delete records nobody needs; the best of every (workload, target, device) stays."""
    from database.sharing import MAX_AGE_DAYS, MAX_KEEP_TOP, prune

    if keep_top is None and not failed and older_than is None:
        raise TuneFarmError("nothing to prune: give --keep-top, --failed and/or --older-than")
    check_range("--keep-top", keep_top, 1, MAX_KEEP_TOP)
    check_range("--older-than", older_than, 0, MAX_AGE_DAYS)
    plan = prune(
        open_storage(db, create=False),
        keep_top=keep_top,
        failed=failed,
        older_than_days=older_than,
        dry_run=dry_run,
    )
    if as_json:
        print(json.dumps({**dataclasses.asdict(plan), "total": plan.total, "dry_run": dry_run}))
        return
    parts = [f"{plan.failed} failed"] if failed else []
    parts += [f"{plan.beyond_top} beyond the top {keep_top}"] if keep_top is not None else []
    parts += [f"{plan.older} older than {older_than:g} days"] if older_than is not None else []
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{verb} {plan.total} records ({', '.join(parts)})")


@db_app.command("check")
@user_errors
def db_check(
    db: DbOpt = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Move misplaced records back to their workload; quarantine the rest "
            "(kept as failed records of kind 'misplaced').",
        ),
    ] = False,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Replay every record's trace on its workload: find records on the wrong kernel.

    Exit code 1 when misplaced records were found and not fixed."""
    from rich.progress import Progress

    from database.integrity import check

    storage = open_storage(db, create=False)
    if as_json:
        report = check(storage, fix=fix)
    else:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("replaying traces", total=None)
            report = check(
                storage,
                fix=fix,
                progress=lambda n, total: bar.update(task, completed=n, total=total),
            )
    if as_json:
        print(json.dumps(report.to_dict()))
    else:
        if report.misplaced:
            rows = [[m.record_id, m.workload_id, m.task_name, m.action] for m in report.misplaced]
            _table("misplaced records", ["record", "workload", "task", "fix"], rows)
        console.print(f"checked {report.records} records: {len(report.misplaced)} misplaced")
        if fix and report.misplaced:
            console.print(
                f"fixed: {report.moved} moved, {report.deleted} surplus copies deleted, "
                f"{report.quarantined} quarantined"
            )
    if report.misplaced and not fix:
        raise TuneFarmError(
            f"{len(report.misplaced)} records are on the wrong kernel; "
            "run 'tunefarm db check --fix' to repair them"
        )


@db_app.command("upgrade")
@user_errors
def db_upgrade(db: DbOpt = None) -> None:
    """Bring the database's schema to this TuneFarm's newest revision (Alembic); in an empty
    database (a new SQLite file, a PostgreSQL database without tables), create it."""
    from database import migrate

    storage = Storage(db, create=True, check_schema=False)
    if storage.created:
        console.print(
            f"created the TuneFarm schema in {redact(storage.url)} "
            f"(revision {migrate.head_revision()})"
        )
        return
    before, after = migrate.upgrade(storage.engine)
    if before == after:
        console.print(f"{redact(storage.url)} is up to date (revision {after})")
    else:
        console.print(f"upgraded {redact(storage.url)} from revision {before} to {after}")
