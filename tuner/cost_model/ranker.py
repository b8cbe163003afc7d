"""The XGBoost part of TuneFarm's cost model: a ranker of candidates and a validity classifier.

Ranking: ``rank:pairwise`` with one query group per workload. A candidate's relevance is its
throughput relative to the best valid candidate of its workload (``min_sec / sec``), so only
the order inside a workload is learned: the absolute speed of different kernels, buckets and
machines never has to be predicted. Groups (workloads) carry weights: at job start, records of
the job's own workloads and of nearby buckets of the same kernel count more.

Failed candidates (build or run errors, timeouts) have no latency: they are kept out of the
ranking target, and a separate ``binary:logistic`` classifier learns P(valid). The score handed
to the search is ``sigmoid(rank margin) * P(valid)``, an expected normalized quality: a
candidate that probably fails is pushed down, one that is valid keeps its ranking order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xgboost as xgb

from database.errors import error_summary

FORMAT_VERSION = 1


@dataclass(frozen=True)
class RankerParams:
    """XGBoost settings of the ranker; validated at construction."""

    eta: float = 0.1
    max_depth: int = 4
    min_child_weight: float = 1.0
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    rounds: int = 150
    online_rounds: int = 40
    nthread: int = 1
    seed: int = 0
    max_bin: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.eta <= 1:
            raise ValueError(f"eta must be in (0, 1] (got {self.eta})")
        for name in ("subsample", "colsample_bytree"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1] (got {getattr(self, name)})")
        if self.rounds < 1 or self.online_rounds < 1 or self.max_depth < 1:
            raise ValueError("rounds, online_rounds and max_depth must be positive")
        if self.max_bin < 2:
            raise ValueError(f"max_bin must be at least 2 (got {self.max_bin})")

    def xgb(self, objective: str) -> dict[str, object]:
        return {
            "objective": objective,
            "eta": self.eta,
            "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "tree_method": "hist",
            "max_bin": self.max_bin,
            "nthread": self.nthread,
            "seed": self.seed,
            "verbosity": 0,
        }


def relevance(secs: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``min_sec / sec`` within each group, for valid rows (NaN stays NaN)."""
    out = np.full(len(secs), np.nan)
    for g in np.unique(group):
        idx = np.flatnonzero((group == g) & np.isfinite(secs))
        if len(idx):
            out[idx] = secs[idx].min() / secs[idx]
    return out


def fit_ranker(
    x: np.ndarray,
    secs: np.ndarray,
    group: np.ndarray,
    params: RankerParams,
    *,
    group_weight: dict[int, float] | None = None,
    rounds: int | None = None,
    base: xgb.Booster | None = None,
) -> xgb.Booster | None:
    """Train (or continue ``base`` with) a pairwise ranker on the valid rows.

    Returns None when there is nothing to learn (no workload with two valid rows).
    """
    valid = np.isfinite(secs)
    rel = relevance(secs, group)
    keep = []
    for g in np.unique(group[valid]):
        idx = np.flatnonzero((group == g) & valid)
        if len(idx) >= 2:
            keep.append(idx)
    if not keep:
        return None
    idx = np.concatenate(keep)  # sorted by group: XGBoost wants each query contiguous
    qid = group[idx]
    dtrain = xgb.DMatrix(x[idx], label=rel[idx], qid=qid)
    if group_weight:
        dtrain.set_weight(np.array([group_weight.get(int(g), 1.0) for g in np.unique(qid)]))
    return xgb.train(
        params.xgb("rank:pairwise"),
        dtrain,
        num_boost_round=rounds or params.rounds,
        xgb_model=base,
        verbose_eval=False,
    )


def fit_validity(x: np.ndarray, secs: np.ndarray, params: RankerParams) -> xgb.Booster | None:
    """A classifier of P(valid); None unless both valid and failed rows exist."""
    valid = np.isfinite(secs)
    if valid.all() or not valid.any():
        return None
    dtrain = xgb.DMatrix(x, label=valid.astype(np.float32))
    return xgb.train(
        params.xgb("binary:logistic") | {"max_depth": 4},
        dtrain,
        num_boost_round=30,
        verbose_eval=False,
    )


def score(ranker: xgb.Booster, validity: xgb.Booster | None, x: np.ndarray) -> np.ndarray:
    """``sigmoid(rank margin) * P(valid)`` per row."""
    data = xgb.DMatrix(x)
    margin = ranker.predict(data, output_margin=True).astype(np.float64)
    out = 1.0 / (1.0 + np.exp(-np.clip(margin, -30, 30)))
    if validity is not None:
        out = out * validity.predict(data).astype(np.float64)
    return out


def to_bytes(booster: xgb.Booster) -> bytes:
    """XGBoost's own UBJSON model format."""
    return bytes(booster.save_raw(raw_format="ubj"))


def from_bytes(blob: bytes) -> xgb.Booster:
    """A booster from UBJSON (or JSON) model bytes; raises ValueError when they are not one."""
    if not blob:
        raise ValueError("empty model")
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(blob))
    except xgb.core.XGBoostError as err:
        raise ValueError(error_summary(err, with_type=False)) from None
    return booster
