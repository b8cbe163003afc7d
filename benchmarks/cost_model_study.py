"""Which ranker settings and features rank held-out candidates best? (a study, not a target)

On one or more TuneFarm databases (e.g. histories written by ``python -m benchmarks
cost-model --history H``), evaluate variants of TuneFarm's pairwise ranker next to stock
MetaSchedule's XGBModel with ``tunefarm cost-model eval``'s splits (chronological and
leave-one-workload-out) and metrics. Variants: tree depth and column sampling, and three
feature sets:

- ``raw``: the pooled per-store + shape features (TuneFarm's feature version 1);
- ``cen``: raw plus the pooled features minus their mean over the candidate's group (the
  workload's rows in the set being scored: depends on what else is in that set);
- ``ref``: raw plus the pooled features minus those of the workload's unscheduled module (a
  fixed reference per workload): TuneFarm's features since version 2.

Usage: ``python -m benchmarks cost-model-study DB.sqlite [DB2.sqlite ...]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xgboost as xgb

from database import Storage, TargetKey
from tuner.cost_model.dataset import Dataset, load_dataset
from tuner.cost_model.evaluate import (
    Predictor,
    chronological,
    leave_one_workload_out,
    predict_stock,
    run_split,
)
from tuner.cost_model.features import N_POOLED, N_SHAPE
from tuner.cost_model.ranker import RankerParams, fit_ranker
from tuner.targets import resolve_target

Features = Callable[[Dataset], np.ndarray]


def raw(ds: Dataset) -> np.ndarray:
    return np.concatenate([ds.x[:, :N_POOLED], ds.x[:, -N_SHAPE:]], axis=1)


def centered(ds: Dataset) -> np.ndarray:
    pooled = ds.x[:, :N_POOLED]
    out = pooled.copy()
    for g in np.unique(ds.group):
        rows = ds.group == g
        out[rows] = pooled[rows] - pooled[rows].mean(axis=0)
    return np.concatenate([raw(ds), out], axis=1)


def referenced(ds: Dataset) -> np.ndarray:
    return ds.x


def ranker(depth: int, colsample: float, features: Features) -> Predictor:
    """TuneFarm's pairwise ranker (``fit_ranker``: 150 rounds, eta 0.1) with these settings
    and features."""
    params = RankerParams(
        max_depth=depth,
        colsample_bytree=colsample,
        subsample=0.8 if colsample < 1 else 1.0,
        nthread=2,
    )

    def run(train: Dataset, test: Dataset) -> np.ndarray | None:
        booster = fit_ranker(features(train), train.secs, train.group, params)
        return None if booster is None else booster.predict(xgb.DMatrix(features(test)))

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cost-model-study")
    parser.add_argument("databases", nargs="+", type=Path, help="SQLite files")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    target = resolve_target("llvm")
    feature_sets: dict[str, Features] = {"raw": raw, "cen": centered, "ref": referenced}
    models: dict[str, Predictor] = {
        f"d{d}_c{c}_{name}": ranker(d, c, f)
        for (d, c), (name, f) in itertools.product(
            [(6, 1.0), (4, 1.0), (2, 0.3)], feature_sets.items()
        )
    }
    models["stock_xgb"] = predict_stock(RankerParams(nthread=2))
    table: dict[str, dict[str, float | None]] = {name: {} for name in models}
    for path in args.databases:
        if not path.is_file():
            parser.error(f"{path} is not a file")
        storage = Storage(f"sqlite:///{path}", create=False)
        ds = load_dataset(storage, TargetKey.of(target))
        for split, folds in (
            ("lowo", leave_one_workload_out(ds)),
            ("chrono", chronological(ds)),
        ):
            for name, metrics in run_split(folds, models).items():
                table[name][f"{path.stem}:{split}"] = metrics["pairwise_accuracy"]
    columns = list(next(iter(table.values())))
    print("pairwise accuracy | " + " | ".join(columns) + " | mean")
    for name, row in table.items():
        vals = [row[c] for c in columns]
        mean = float(np.mean([v for v in vals if v is not None]))
        print(f"{name} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {mean:.3f}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
