"""Database benchmark: best-record lookup latency and commit throughput by database size.

For SQLite and PostgreSQL (a fresh database on the server named by ``--pg`` or
``$TUNEFARM_TEST_PG_URL``), the table is grown to each size in turn (bulk inserts of
realistic rows spread over many workloads), then:

- ``best()`` latency: TuneFarm's build-time lookup of the best record of one real workload
  for a target (median and p90 over repeated calls; workload id cached as in a build);
- commit throughput: one measured candidate per transaction, as a tuning job commits them.

Finally a small real tune reports the database's share of the job's wall time. Usage::

    python -m benchmarks database [--sizes 10000 100000 1000000] [--no-pg] [--no-job]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import tvm
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import create_engine, insert, text
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import TuningRecord

from benchmarks.common import machine_header, results_path
from database import Measurement, Storage, TuneFarmDatabase
from database.models import RecordRow, WorkloadRow, utcnow
from database.targets import TargetKey
from tuner.cli.render import LiveProgress
from workers.fingerprint import cpu_fingerprint

ROOT = Path(__file__).resolve().parent.parent
PER_WORKLOAD = 200  # records per filler workload
BATCH = 20_000


def _matmul() -> tvm.IRModule:
    from tests.conftest import matmul_mod

    return matmul_mod(64, 64, 64)


class Bench:
    """One backend: grows the table and measures at each size."""

    def __init__(self, url: str, target: tvm.target.Target) -> None:
        self.storage = Storage(url)
        self.db = TuneFarmDatabase(self.storage, target)
        self.target = target
        self.mod = _matmul()
        workload = self.db.commit_workload(self.mod)
        trace, _, _, args = TuningRecord(
            tvm.s_tir.Schedule(self.mod).trace,
            workload,
            None,
            target,
            ArgInfo.from_prim_func(self.mod["main"]),
        ).as_json()
        self.trace, self.args = trace, args
        self.workload = workload
        self.tkey = TargetKey.of(target)
        self.mod_json = tvm.ir.save_json(self.mod)
        self.rows = 0
        self.serial = 0

    def grow(self, size: int, progress: Progress) -> None:
        """Bulk-insert filler records (other workloads) until the table holds ``size``."""
        task = progress.add_task(f"{self.storage.dialect}: fill to {size:,}", total=size)
        progress.update(task, completed=self.rows)
        trace_json, args_json = json.dumps(self.trace), json.dumps(self.args)
        with self.storage.engine.begin() as conn:
            while self.rows < size:
                n = min(BATCH, size - self.rows)
                n_wl = max(1, n // PER_WORKLOAD)
                wl_rows = [
                    {
                        "shash": f"f{self.serial + i:015x}",
                        "mod_json": self.mod_json,
                        "task_name": "filler",
                        "tvm_version": tvm.__version__,
                        "created_at": utcnow(),
                    }
                    for i in range(n_wl)
                ]
                self.serial += n_wl
                ids = list(conn.scalars(insert(WorkloadRow).returning(WorkloadRow.id), wl_rows))
                now = utcnow()
                recs = [
                    {
                        "workload_id": ids[i % n_wl],
                        "candidate_hash": f"{self.rows + i:016x}",
                        "trace_json": trace_json,
                        "args_info_json": args_json,
                        "run_secs_json": "[1e-5, 1.1e-5]",
                        "mean_sec": 1e-5 * (1 + (i * 7919 % 1000) / 1000),
                        "median_sec": 1e-5 * (1 + (i * 7919 % 1000) / 1000),
                        "rank_sec": 1e-5 * (1 + (i * 7919 % 1000) / 1000),
                        "std_sec": 5e-7,
                        "target_key": self.tkey.key,
                        "target_json": self.tkey.json,
                        "target_kind": self.tkey.kind,
                        "target_arch": self.tkey.arch,
                        "created_at": now,
                    }
                    for i in range(n)
                ]
                conn.execute(insert(RecordRow), recs)
                self.rows += n
                progress.update(task, completed=self.rows)
        progress.remove_task(task)
        if self.storage.dialect == "postgresql":
            with self.storage.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")

    def lookup(self, repeats: int = 300) -> dict[str, float]:
        """Latency of the best-record lookup for the real workload (ids cached, as in a build):
        the indexed query alone (``best_row``) and ``best()`` with TVM's parse of the trace."""
        assert self.db.best(self.mod, self.target) is not None
        out = {}
        for name, fn in (("query", self.db.best_row), ("best", self.db.best)):
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn(self.mod, self.target)
                samples.append(time.perf_counter() - start)
            samples.sort()
            out[f"{name}_median_ms"] = statistics.median(samples) * 1e3
            out[f"{name}_p90_ms"] = samples[int(0.9 * len(samples))] * 1e3
        return out

    def commit(self, count: int = 300) -> float:
        """Records per second, one transaction each (as a tuning job commits)."""
        start = time.perf_counter()
        for _ in range(count):
            self.serial += 1
            self.db.add(
                Measurement(
                    workload=self.workload,
                    candidate_hash=f"c{self.serial:015x}",
                    trace_json=self.trace,
                    args_info_json=self.args,
                    run_secs=[1e-5 * (1 + self.serial * 7919 % 1000 / 1000), 1.2e-5],
                    target=self.target,
                    device=cpu_fingerprint(),
                    worker="bench",
                )
            )
        self.rows += count
        return count / (time.perf_counter() - start)


def _pg_database(base: str) -> tuple[str, Any]:
    name = f"tf_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(
        base.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return base.rsplit("/", 1)[0] + f"/{name}", drop


def _job_share(console: Console, trials: int) -> dict[str, float]:
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.targets import resolve_target
    from workers.config import MeasureConfig

    with tempfile.TemporaryDirectory(prefix="tunefarm-dbbench-") as tmp:
        storage = Storage(f"sqlite:///{tmp}/job.db")
        model = load_model(ROOT / "tests" / "data" / "tiny_matmul.py")
        config = TuneConfig(
            trials=trials, trials_per_iter=8, seed=0, measure=MeasureConfig(min_repeat_ms=10)
        )
        summary = tune(
            model.mod, resolve_target("llvm"), storage, config, progress=LiveProgress(console)
        )
    return {
        "trials": trials,
        "wall_sec": summary.wall_sec,
        "db_sec": summary.db_sec,
        "db_share": summary.db_sec / summary.wall_sec,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks database", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--pg", default=os.environ.get("TUNEFARM_TEST_PG_URL"))
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--no-job", action="store_true")
    parser.add_argument("--job-trials", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    console = Console()
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    backends: list[tuple[str, str, Any]] = []
    tmp = tempfile.TemporaryDirectory(prefix="tunefarm-dbbench-")
    backends.append(("sqlite", f"sqlite:///{tmp.name}/bench.db", None))
    if args.pg and not args.no_pg:
        url, drop = _pg_database(args.pg)
        backends.append(("postgresql", url, drop))
    results: list[dict[str, Any]] = []
    try:
        for name, url, _drop in backends:
            bench = Bench(url, target)
            with Progress(console=console, transient=True) as progress:
                for size in sorted(args.sizes):
                    bench.grow(size, progress)
                    rate = bench.commit()
                    lookup = bench.lookup()
                    results.append(
                        {"backend": name, "records": size, **lookup, "commits_per_sec": rate}
                    )
                    console.print(
                        f"{name} {size:>9,} records: lookup {lookup['query_median_ms']:.3f} ms, "
                        f"best() {lookup['best_median_ms']:.3f} ms, {rate:.0f} commits/s"
                    )
            bench.storage.dispose()
    finally:
        for _name, _url, drop in backends:
            if drop:
                drop()
        tmp.cleanup()
    job = None if args.no_job else _job_share(console, args.job_trials)
    table = Table(title="schedule database: lookup latency and commit throughput")
    cols = ("backend", "records", "lookup median", "lookup p90", "best() median", "commits/s")
    for col in cols:
        table.add_column(col, justify="left" if col == "backend" else "right")
    for r in results:
        table.add_row(
            r["backend"],
            f"{r['records']:,}",
            f"{r['query_median_ms']:.3f} ms",
            f"{r['query_p90_ms']:.3f} ms",
            f"{r['best_median_ms']:.3f} ms",
            f"{r['commits_per_sec']:.0f}",
        )
    console.print(table)
    if job:
        console.print(
            f"tune job ({job['trials']} trials): database {job['db_sec']:.2f} s of "
            f"{job['wall_sec']:.1f} s wall = {job['db_share']:.2%}"
        )
    out = args.out or results_path("database")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "database",
                "machine": machine_header(),
                "results": results,
                "job": job,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")
    return 0
