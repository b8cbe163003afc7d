"""Warm-start benchmark: seconds until a job's cost model is ready, for a history of 10^4 records.

A history is built from a real tune's records (``--source``, a TuneFarm database; default: a
fresh 40-trial tune of ``benchmarks/data/cm_matmul.py`` at n=8,32): each of its workloads is
copied over many shape buckets (families of 8 buckets) with its records, latencies scaled per
copy with 5% noise, until the table holds ``--records`` records. Then ``warm_model`` (what a job
runs before its first round) is timed on one of the source's workloads:

- ``cold_cache`` (with ``--cold``; slow): no cached features, no snapshot (every trace
  replayed, as before the cache); the other runs start from a history whose features were
  cached by the jobs that measured it (copied with each record);
- ``warm_cache``: cached features, no snapshot (the base trained from scratch);
- ``fresh_snapshot``: cached features, a fresh snapshot (reused);
- after ``--grow`` more records (their features cached, as the jobs that measured them do):
  ``stale_full_retrain`` and ``stale_incremental`` (the snapshot continued on the new records).

``--accuracy`` also compares incremental with full training on the source's real records
(chronological: base on the oldest 50%, continued on the next 30%, tested on the newest 20%).
Usage::

    python -m benchmarks warm-start [--records 10000] [--grow 3000] [--source URL] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from rich.console import Console
from rich.table import Table
from sqlalchemy import delete, insert, select

from benchmarks.common import machine_header, results_path
from database import Storage, TargetKey
from database.models import CostModelSnapshot, RecordFeatures, RecordRow, WorkloadRow
from tuner.cost_model import warm
from tuner.cost_model.dataset import Dataset, load_dataset
from tuner.cost_model.metrics import evaluate
from tuner.cost_model.ranker import RankerParams, fit_ranker
from tuner.cost_model.warm import score_rows, warm_model
from tuner.fastimport import preload_tensor_intrin

ROOT = Path(__file__).resolve().parent.parent
FAMILY = 8  # buckets per copied kernel family


def _source(console: Console, work: Path) -> str:
    """A fresh small real tune (stock cost model) of cm_matmul at n=8,32."""
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from tuner.targets import resolve_target
    from workers.config import MeasureConfig

    url = f"sqlite:///{work / 'source.db'}"
    model = load_model(ROOT / "benchmarks" / "data" / "cm_matmul.py")
    config = TuneConfig(
        trials=40,
        trials_per_iter=8,
        seed=0,
        measure=MeasureConfig(min_repeat_ms=5, repeat=2),
        cost_model="xgb",
    )
    tune(model.mod, resolve_target("llvm"), Storage(url), config, buckets={"n": [8, 32]})
    console.print(f"source: a 40-trial tune into {url}")
    return url


class History:
    """Copies of a source's workloads and records, grown to a number of records."""

    def __init__(self, source: str, url: str, seed: int = 0) -> None:
        src = Storage(source, create=False)
        self.workloads = [
            dict(r._mapping)
            for r in src.run(lambda s: list(s.execute(WorkloadRow.__table__.select())))
        ]
        recs = [
            dict(r._mapping)
            for r in src.run(lambda s: list(s.execute(RecordRow.__table__.select())))
        ]
        self.records: dict[int, list[dict[str, Any]]] = {}
        for r in recs:
            self.records.setdefault(r["workload_id"], []).append(r)
        self.workloads = [w for w in self.workloads if w["id"] in self.records]
        # the source's cached features, copied with each record (the jobs that measured a
        # history's records cached their features); none: every copy replays (--cold)
        self.features = {
            r._mapping["record_id"]: dict(r._mapping)
            for r in src.run(lambda s: list(s.execute(RecordFeatures.__table__.select())))
        }
        self.storage = Storage(url)
        self.rng = np.random.default_rng(seed)
        self.copies = 0
        self.count = 0

    def grow(self, size: int) -> None:
        """Insert copies (one per source workload per copy number) until ``size`` records."""
        with self.storage.engine.begin() as conn:
            while self.count < size:
                c = self.copies
                self.copies += 1
                for w in self.workloads:
                    if self.count >= size:
                        break
                    row = {k: v for k, v in w.items() if k != "id"}
                    if c:  # copy 0 keeps the source's identity: the job's workload
                        row["shash"] = f"{w['shash'][:20]}{c:012x}"
                        row["family_shash"] = f"fam{w['id']:08x}{c // FAMILY:08x}"[:32]
                        row["bucket_json"] = json.dumps({"n": 2 ** (c % FAMILY)})
                    wid = conn.execute(
                        insert(WorkloadRow).returning(WorkloadRow.id), [row]
                    ).scalar_one()
                    scale = float(self.rng.lognormal(0.0, 1.0))
                    source = self.records[w["id"]][: size - self.count]
                    recs = []
                    for r in source:
                        new = {k: v for k, v in r.items() if k not in ("id", "job_id")}
                        new["workload_id"] = wid
                        if r["mean_sec"] is not None:
                            new["mean_sec"] = r["mean_sec"] * scale * self.rng.lognormal(0, 0.05)
                            new["run_secs_json"] = json.dumps([new["mean_sec"]])
                        recs.append(new)
                    ids = conn.execute(
                        insert(RecordRow).returning(RecordRow.id, sort_by_parameter_order=True),
                        recs,
                    ).scalars()
                    feats = [
                        {**self.features[r["id"]], "record_id": rid, "workload_id": wid}
                        for r, rid in zip(source, ids, strict=True)
                        if r["id"] in self.features
                    ]
                    if feats:
                        conn.execute(insert(RecordFeatures), feats)
                    self.count += len(recs)


def _source_targets(storage: Storage) -> list[tvm.target.Target]:
    """The targets the source's records were measured on."""
    rows = storage.run(lambda s: list(s.scalars(select(RecordRow.target_json).distinct())))
    return [tvm.target.Target(json.loads(t)) for t in rows]


def _timed(url: str, target: tvm.target.Target, mod: tvm.IRModule, params: RankerParams) -> dict:
    storage = Storage(url, create=False)
    start = time.perf_counter()
    model, note = warm_model(storage, target, [mod], params=params, seed=0)
    sec = time.perf_counter() - start
    storage.dispose()
    return {"sec": round(sec, 3), "note": note, "local": model.n_local}


def incremental_accuracy(ds: Dataset, params: RankerParams) -> dict[str, Any]:
    """Pairwise accuracy on the newest 20% of base (oldest 50%) + continued (next 30%) against
    full training on the oldest 80% and the base alone."""
    order = np.argsort(ds.record_id, kind="stable")
    n = len(order)
    a, b = round(n * 0.5), round(n * 0.8)

    def part(idx: np.ndarray) -> Dataset:
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        return ds.subset(mask)

    old, new, test, train = part(order[:a]), part(order[a:b]), part(order[b:]), part(order[:b])
    out: dict[str, Any] = {"records": n, "test_records": len(test)}
    base = fit_ranker(old.x, old.secs, old.group, params)
    full = fit_ranker(train.x, train.secs, train.group, params)
    grown = (
        fit_ranker(new.x, new.secs, new.group, params, rounds=warm.INCREMENT_ROUNDS, base=base)
        if base is not None
        else None
    )
    for name, booster in (("base_only", base), ("full_retrain", full), ("incremental", grown)):
        if booster is not None:
            metrics = evaluate(score_rows(booster, test.x), test.secs, test.group)
            out[name] = {k: metrics[k] for k in ("pairwise_accuracy", "peak@5", "pairs")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks warm-start", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--grow", type=int, default=3_000, help="records added for the stale runs")
    parser.add_argument("--source", default=None, help="a TuneFarm database of a real tune")
    parser.add_argument("--accuracy", nargs="*", default=None, help="databases (default: source)")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--cold", action="store_true", help="also time a history with no cached features (slow)"
    )
    args = parser.parse_args(argv)
    console = Console()
    preload_tensor_intrin()
    work = Path(tempfile.mkdtemp(prefix="tunefarm-warm-"))
    source = args.source or _source(console, work)
    src = Storage(source, create=False)
    for key in {TargetKey.of(t) for t in _source_targets(src)}:
        load_dataset(src, key)  # the source's features cached once, copied with its records
    src.dispose()
    url = f"sqlite:///{work / 'history.db'}"
    hist = History(source, url)
    hist.grow(args.records)
    storage = hist.storage
    first = hist.records[hist.workloads[0]["id"]][0]
    target = tvm.target.Target(json.loads(first["target_json"]))
    key = TargetKey.of(target)
    mod = tvm.ir.load_json(hist.workloads[0]["mod_json"])
    params = RankerParams(nthread=os.cpu_count() or 1, seed=0)
    console.print(
        f"history: {hist.count:,} records over {hist.copies * len(hist.workloads):,} workloads "
        f"({len(hist.workloads)} source workloads x {hist.copies} copies)"
    )

    def clear(*tables: Any) -> None:
        storage.run(lambda s: [s.execute(delete(t)) for t in tables])

    runs: dict[str, Any] = {}
    if args.cold:
        clear(RecordFeatures, CostModelSnapshot)
        runs["cold_cache"] = _timed(url, target, mod, params)
    clear(CostModelSnapshot)
    runs["warm_cache"] = _timed(url, target, mod, params)
    runs["fresh_snapshot"] = _timed(url, target, mod, params)
    start = time.perf_counter()
    full = load_dataset(Storage(url, create=False), key)
    runs["load_cached_dataset"] = {
        "sec": round(time.perf_counter() - start, 3),
        "records": len(full),
        "replayed": full.replayed,
    }
    hist.grow(args.records + args.grow)
    load_dataset(storage, key)  # the jobs that measured them cached their features
    latest = storage.run(
        lambda s: s.scalar(select(CostModelSnapshot.id).order_by(CostModelSnapshot.id.desc()))
    )
    warm.INCREMENTAL = False
    runs["stale_full_retrain"] = _timed(url, target, mod, params)
    storage.run(lambda s: s.execute(delete(CostModelSnapshot).where(CostModelSnapshot.id > latest)))
    warm.INCREMENTAL = True
    runs["stale_incremental"] = _timed(url, target, mod, params)
    accuracy = {}
    for db in args.accuracy if args.accuracy is not None else [source]:
        ds = load_dataset(Storage(db, create=False), key)
        accuracy[db] = incremental_accuracy(ds, params)

    table = Table(title=f"warm_model(...) on a history of {args.records:,} records")
    for col in ("run", "seconds", "base / local"):
        table.add_column(col)
    for name, res in runs.items():
        table.add_row(name, f"{res['sec']:.2f}", res.get("note", f"{res.get('records')} records"))
    console.print(table)
    for db, res in accuracy.items():
        console.print(f"incremental vs full training on {db}: {json.dumps(res)}")
    out = Path(args.out) if args.out else results_path("warm-start")
    out.write_text(
        json.dumps(
            {
                "machine": machine_header(),
                "records": args.records,
                "grow": args.grow,
                "workloads": hist.copies * len(hist.workloads),
                "source": source,
                "runs": runs,
                "incremental_accuracy": accuracy,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
