"""Held-out evaluation of TuneFarm's ranker next to stock XGBModel and a random ranker.

Two splits of a target's records: *chronological* (train on the oldest records, test on the
newest: the next job's situation) and *leave-one-workload-out* (test on a workload none of
whose records were trained on: a new kernel or bucket). All three models see the same
training rows; metrics are those of :mod:`tuner.cost_model.metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tuner.cost_model.dataset import Dataset
from tuner.cost_model.metrics import evaluate
from tuner.cost_model.ranker import RankerParams, fit_ranker, relevance
from tuner.cost_model.warm import score_rows

MODELS = ("tunefarm", "stock_xgb", "random")
Predictor = Callable[[Dataset, Dataset], np.ndarray | None]


def predict_tunefarm(params: RankerParams) -> Predictor:
    def run(train: Dataset, test: Dataset) -> np.ndarray | None:
        booster = fit_ranker(train.x, train.secs, train.group, params)
        return None if booster is None else score_rows(booster, test.x)

    return run


def predict_stock(params: RankerParams) -> Predictor:
    """Stock MetaSchedule XGBModel, trained as it trains itself during a search: pack-sum
    regression of ``min_cost / cost`` per workload (failed candidates count as cost 1e10)."""

    def run(train: Dataset, test: Dataset) -> np.ndarray | None:
        from tvm.s_tir.meta_schedule.cost_model import XGBModel

        secs = np.where(np.isfinite(train.secs), train.secs, 1e10)
        ys = np.nan_to_num(relevance(secs, train.group), nan=0.0)
        keep = [i for i, p in enumerate(train.per_store) if len(p)]
        if len(keep) < 2:
            return None
        model = XGBModel(num_tuning_cores=params.nthread, num_warmup_samples=0)
        model._train(xs=[train.per_store[i] for i in keep], ys=ys[keep].astype("float32"))
        out = np.zeros(len(test))
        has = [i for i, p in enumerate(test.per_store) if len(p)]
        if has:
            out[has] = model._predict(xs=[test.per_store[i] for i in has])
        return out

    return run


def predict_random(seed: int) -> Predictor:
    def run(train: Dataset, test: Dataset) -> np.ndarray | None:
        return np.random.default_rng(seed).uniform(size=len(test))

    return run


def predictors(params: RankerParams, seed: int = 0) -> dict[str, Predictor]:
    return {
        "tunefarm": predict_tunefarm(params),
        "stock_xgb": predict_stock(params),
        "random": predict_random(seed),
    }


def chronological(ds: Dataset, test_frac: float = 0.2) -> list[tuple[Dataset, Dataset]]:
    """Oldest records to train, newest ``test_frac`` to test (one fold)."""
    cut = round(len(ds) * (1 - test_frac))
    order = np.argsort(ds.record_id, kind="stable")
    train = np.zeros(len(ds), dtype=bool)
    train[order[:cut]] = True
    return [(ds.subset(train), ds.subset(~train))]


def leave_one_workload_out(ds: Dataset, max_folds: int = 8) -> list[tuple[Dataset, Dataset]]:
    """One fold per workload (the ``max_folds`` with most valid records): train on the others."""
    valid = ds.valid
    sizes = {int(g): int((valid & (ds.group == g)).sum()) for g in np.unique(ds.group)}
    held = [g for g, n in sorted(sizes.items(), key=lambda kv: -kv[1]) if n >= 2][:max_folds]
    if len(sizes) < 2:
        return []
    return [(ds.subset(ds.group != g), ds.subset(ds.group == g)) for g in held]


def run_split(
    folds: list[tuple[Dataset, Dataset]], models: dict[str, Predictor]
) -> dict[str, dict[str, Any]]:
    """Metrics of each model over the folds (test predictions pooled across folds)."""
    out: dict[str, dict[str, Any]] = {}
    for name, predict in models.items():
        preds, secs, groups = [], [], []
        start = time.perf_counter()
        for train, test in folds:
            if not len(test) or not train.valid.any():
                continue
            pred = predict(train, test)
            if pred is None:
                continue
            preds.append(pred)
            secs.append(test.secs)
            groups.append(test.group)
        if preds:
            metrics = evaluate(np.concatenate(preds), np.concatenate(secs), np.concatenate(groups))
        else:
            metrics = {"pairwise_accuracy": None, "pairs": 0, "workloads": 0, "rows": 0}
        metrics["folds"] = len(preds)
        metrics["sec"] = round(time.perf_counter() - start, 3)
        out[name] = metrics
    return out


def compare(
    ds: Dataset, params: RankerParams, *, test_frac: float = 0.2, max_folds: int = 8, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """``{model: {"pairwise_accuracy": chronological, ..., "chronological": {...},
    "leave_one_workload_out": {...}}}``; the top-level metrics are the chronological split's."""
    models = predictors(params, seed)
    splits = {
        "chronological": run_split(chronological(ds, test_frac), models),
        "leave_one_workload_out": run_split(leave_one_workload_out(ds, max_folds), models),
    }
    out: dict[str, dict[str, Any]] = {}
    for name in models:
        chrono = splits["chronological"][name]
        out[name] = {
            "pairwise_accuracy": chrono.get("pairwise_accuracy"),
            **{split: res[name] for split, res in splits.items()},
        }
    return out
