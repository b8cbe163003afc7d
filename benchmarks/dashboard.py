"""Dashboard benchmark: each page's server time on a database of 10^6 records.

For SQLite (a temporary file) and PostgreSQL (a fresh database on the server named by
``--pg`` or ``$TUNEFARM_TEST_PG_URL``), a synthetic team database is bulk-inserted through the
models: ``--models`` models of ``--kernels`` kernels at 3 buckets each, ``--jobs`` jobs
spread over them (the newest still running), the records split evenly over the jobs, on three
devices; each model's first job records the kernels' untuned defaults, each finished job
how its tasks ended (``job_tasks``: weights, converged). Then the real
dashboard server (uvicorn on loopback) is asked for every page and the JSON the pages fetch;
a page's time is the request's wall time at the client (server time plus the loopback
round trip): the first request, then the median and the slowest of ``--repeats`` more (the
server keeps finished jobs' kernels, so the jobs list's repeats read only running jobs').
The machine's 1-minute load average before and after is recorded beside the times.
Usage::

    python -m benchmarks dashboard [--records 1000000] [--no-pg] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import insert, select, update

from benchmarks.common import RESULTS, machine_header
from database import Storage
from database.models import EMPTY_TRACE, JobRow, JobTaskRow, RecordRow, WorkloadRow

BATCH = 20_000
BUDGET_MS = 300.0
DEVICES = ("Xeon 8480 | x86_64 | 56 cores", "EPYC 9654 | x86_64 | 96 cores", "Graviton3 | arm64")


def fill(url: str, records: int, n_models: int, n_kernels: int, n_jobs: int) -> dict[str, Any]:
    """Bulk-insert the synthetic database; returns its shape and the ids the pages use."""
    storage = Storage(url)
    start = time.perf_counter()
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    per_job = records // n_jobs
    target = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 56}
    with storage.engine.begin() as conn:
        wl_rows = [
            {
                "shash": f"{m:04x}{k:04x}{b:08x}",
                "mod_json": "{}",
                "task_name": f"fused_kernel_{k}",
                "family_shash": f"{m:04x}{k:04x}00000000",
                "bucket_json": json.dumps({"s": b}),
                "flops": 2.0e6 * b,
                "tvm_version": "0.27.0",
                "created_at": t0,
            }
            for m in range(n_models)
            for k in range(n_kernels)
            for b in (16, 64, 256)
        ]
        wids = list(conn.scalars(insert(WorkloadRow).returning(WorkloadRow.id), wl_rows))
        shashes = {w: r["shash"] for w, r in zip(wids, wl_rows, strict=True)}
        per_model = len(wids) // n_models
        serial = 0
        for j in range(n_jobs):
            model = j % n_models
            kernels = wids[model * per_model : (model + 1) * per_model]
            started = t0 + dt.timedelta(hours=6 * j)
            running = j == n_jobs - 1
            job_id = conn.scalar(
                insert(JobRow)
                .values(
                    name=f"model-{model}-job-{j}",
                    status="running" if running else "done",
                    model=f"model-{model}",
                    target_json=json.dumps(target),
                    budget=per_job,
                    trials_done=per_job,
                    submitted_by=f"user{j % 7}",
                    started_at=started,
                    finished_at=None if running else started + dt.timedelta(hours=4),
                )
                .returning(JobRow.id)
            )
            first = j < n_models
            device = DEVICES[j % len(DEVICES)]
            done = 0
            while done < per_job:
                n = min(BATCH, per_job - done)
                rows = []
                for i in range(done, done + n):
                    wid = kernels[i % len(kernels)]
                    default = first and i < len(kernels)
                    untuned = 2e-4 * (1 + wid % 5)
                    rows.append(
                        {
                            "workload_id": wid,
                            "candidate_hash": shashes[wid] if default else f"c{serial + i:015x}",
                            "trace_json": EMPTY_TRACE if default else f'[["insts {i}"], []]',
                            "args_info_json": "[]",
                            "run_secs_json": "[1.0e-4, 1.1e-4, 1.05e-4]",
                            "mean_sec": untuned
                            if default
                            else untuned * (0.2 + 0.8 * ((i * 7919) % 1000) / 1000),
                            "std_sec": 3e-6,
                            "target_key": "t" * 40,
                            "target_json": json.dumps(target),
                            "target_kind": "llvm",
                            "target_arch": "sapphirerapids",
                            "device": device,
                            "device_key": f"{j % len(DEVICES):040d}",
                            "worker": f"node{j % 4}:{1000 + j}",
                            "job_id": job_id,
                            "build_sec": 0.2,
                            "created_at": started + dt.timedelta(seconds=i * 14400 / per_job),
                        }
                    )
                conn.execute(insert(RecordRow), rows)
                done += n
            serial += per_job
            if not running:  # how each task ended, as a finished job stores it
                ends = [
                    {
                        "job_id": job_id,
                        "workload_id": wid,
                        "name": f"fused_kernel_{k}",
                        "weight": 1 + k % 3,
                        "trials": per_job // len(kernels),
                        "best_sec": 1e-4,
                        "baseline_sec": 2e-4,
                        "expected_gain": 0.01 * (k % 5),
                        "converged": k % 2 == 0,
                        "converged_at": per_job // len(kernels) // 2 if k % 2 == 0 else None,
                    }
                    for k, wid in enumerate(kernels)
                ]
                conn.execute(insert(JobTaskRow), ends)
        last_job = conn.scalar(select(JobRow.id).order_by(JobRow.id.desc()).limit(1))
        conn.execute(update(JobRow).where(JobRow.id == last_job).values(finished_at=None))
    if storage.dialect == "postgresql":
        with storage.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    storage.dispose()
    return {
        "records": per_job * n_jobs,
        "jobs": n_jobs,
        "models": n_models,
        "workloads": len(wids),
        "fill_sec": time.perf_counter() - start,
        "job_id": last_job - n_jobs // 2,
        "running_job_id": last_job,
        "workload_id": wids[len(wids) // 2],
    }


def pages(shape: dict[str, Any]) -> dict[str, str]:
    """Every page and the JSON the pages fetch, by name."""
    job, wid = shape["job_id"], shape["workload_id"]
    return {
        "jobs": "/",
        "jobs (live poll)": "/api/jobs",
        "job": f"/jobs/{job}",
        "job curves": f"/api/jobs/{job}/curves",
        "running job": f"/jobs/{shape['running_job_id']}",
        "models": "/models",
        "coverage": "/models/model-3",
        "workload": f"/workloads/{wid}",
        "devices": "/devices",
        "compare": f"/compare?a={job}&b={max(1, job - shape['models'])}",
    }


def time_pages(url: str, shape: dict[str, Any], repeats: int) -> dict[str, dict[str, float]]:
    """Each page's request time in ms: the first, the median and the slowest of the rest."""
    from tests.tuner.dashboard.server import serve

    out = {}
    with serve(url) as base:
        for name, path in pages(shape).items():
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                with urllib.request.urlopen(base + path, timeout=120) as response:
                    response.read()
                    assert response.status == 200, path
                times.append((time.perf_counter() - start) * 1e3)
            rest = times[1:]
            out[name] = {
                "first_ms": times[0],
                "median_ms": statistics.median(rest),
                "max_ms": max(rest),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks dashboard")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--kernels", type=int, default=12, help="kernels a model (x3 buckets)")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pg", default=os.environ.get("TUNEFARM_TEST_PG_URL"))
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    console = Console()
    results: dict[str, Any] = {"machine": machine_header(), "budget_ms": BUDGET_MS, "backends": {}}
    backends = []
    if not args.no_sqlite:
        backends.append("sqlite")
    if not args.no_pg and args.pg:
        backends.append("postgresql")
    for backend in backends:
        with tempfile.TemporaryDirectory() as tmp:
            drop = None
            if backend == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'dashboard.db'}"
            else:
                from benchmarks.database import _pg_database

                url, drop = _pg_database(args.pg)
            try:
                console.print(f"{backend}: filling {args.records:,} records...")
                shape = fill(url, args.records, args.models, args.kernels, args.jobs)
                console.print(f"{backend}: filled in {shape['fill_sec']:.0f} s")
                load_before = os.getloadavg()[0]
                times = time_pages(url, shape, args.repeats)
                shape["load_average"] = [load_before, os.getloadavg()[0]]
            finally:
                if drop is not None:
                    drop()
        results["backends"][backend] = {"shape": shape, "pages": times}
        load = ", ".join(f"{x:.1f}" for x in shape["load_average"])
        table = Table(
            title=f"dashboard page times, {backend}, {shape['records']:,} records (load {load})"
        )
        for col in ("page", "first ms", "median ms", "max ms", f"<= {BUDGET_MS:g} ms"):
            table.add_column(col, justify="left" if col == "page" else "right")
        for name, t in times.items():
            ok = max(t["first_ms"], t["max_ms"]) <= BUDGET_MS
            table.add_row(
                name,
                f"{t['first_ms']:.1f}",
                f"{t['median_ms']:.1f}",
                f"{t['max_ms']:.1f}",
                "yes" if ok else "[red]no[/red]",
            )
        console.print(table)
    path = args.output or RESULTS / f"{dt.date.today()}-dashboard-page-times.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"results: {path}")
    return 0
