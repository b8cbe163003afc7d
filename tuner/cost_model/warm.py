"""Warm start: the base model from the database's latest snapshot, or trained from its records.

At job start, the base ranker of the target kind and arch is the latest snapshot when it is
compatible (same format, feature and TVM versions, an XGBoost that reads it) and fresh (few
valid records were added since). A stale one is continued with a few boosting rounds on the
new records only; without a usable snapshot the base is trained from the records. Either is
saved as a new snapshot, so every teammate's next job starts from it. Features of records come
from the per-record cache (:mod:`database.training`). A corrupt or incompatible snapshot is
logged and skipped. The job's own workloads and the other buckets of their kernels are then
loaded as weighted local data for the online part of the model.
"""

from __future__ import annotations

import getpass
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import xgboost as xgb

from database import Storage, TargetKey, shash_of
from database.snapshots import latest_snapshot, save_snapshot
from database.training import record_stats, workload_summaries
from database.transfer import bucket_distance
from tuner.cost_model.dataset import Dataset, load_dataset
from tuner.cost_model.features import FEATURE_VERSION
from tuner.cost_model.metrics import evaluate
from tuner.cost_model.model import SAME_WORKLOAD_WEIGHT, TunefarmModel
from tuner.cost_model.ranker import FORMAT_VERSION, RankerParams, fit_ranker, from_bytes, to_bytes

log = logging.getLogger("tunefarm.cost_model")

MIN_TRAIN_VALID = 16  # fewer valid records than this: no base model
MAX_RECORDS = 20000  # the newest records a base model is trained on
MAX_LOCAL = 2000  # the newest stored records of the job's workloads and neighbours
REFRESH_RATIO = 0.25  # retrain when this share of new valid records was added since
INCREMENT_ROUNDS = 40  # boosting rounds a stale snapshot is continued with on the new records
MAX_TREES_RATIO = 4  # past this many times params.rounds trees, retrain from scratch
INCREMENTAL = True  # continue a stale snapshot on the new records instead of retraining


@dataclass(frozen=True)
class BaseModel:
    """The generic ranker a job starts from, and where it came from."""

    booster: xgb.Booster | None
    source: str  # "snapshot", "continued", "trained" or "none"
    snapshot_id: int | None
    note: str


def train_base(
    storage: Storage,
    target: TargetKey,
    params: RankerParams,
    *,
    max_records: int = MAX_RECORDS,
    save: bool = True,
    dataset: Dataset | None = None,
) -> BaseModel:
    """Train the generic ranker on every record of the target kind and arch; save a snapshot."""
    start = time.perf_counter()
    ds = dataset if dataset is not None else load_dataset(storage, target, max_records=max_records)
    if ds.valid.sum() < MIN_TRAIN_VALID:
        return BaseModel(None, "none", None, f"{int(ds.valid.sum())} valid records: too few")
    booster = fit_ranker(ds.x, ds.secs, ds.group, params)
    if booster is None:
        return BaseModel(None, "none", None, "no workload with two valid records")
    metrics: dict[str, Any] = {
        "train_sec": round(time.perf_counter() - start, 3),
        "train": evaluate(score_rows(booster, ds.x), ds.secs, ds.group),
    }
    snap_id = None
    if save:
        snap_id = _save(storage, target, booster, len(ds), ds.trained_on(), metrics)
    note = f"trained on {len(ds)} records of {len(set(ds.group.tolist()))} workloads"
    return BaseModel(booster, "trained", snap_id, note)


def continue_base(
    storage: Storage, target: TargetKey, params: RankerParams, info: Any, blob: bytes
) -> BaseModel | None:
    """A stale snapshot continued (XGBoost's ``xgb_model``) with INCREMENT_ROUNDS rounds on
    the records added since it was trained; saved as a new snapshot.

    None when it cannot be continued (unreadable, or MAX_TREES_RATIO x ``params.rounds``
    trees reached): retrain instead.
    """
    start = time.perf_counter()
    try:
        booster = from_bytes(blob)
    except ValueError:
        return None
    if booster.num_boosted_rounds() + INCREMENT_ROUNDS > MAX_TREES_RATIO * params.rounds:
        return None
    after = int(info.trained_on.get("max_id") or 0)
    ds = load_dataset(storage, target, after_id=after, max_records=MAX_RECORDS)
    grown = fit_ranker(ds.x, ds.secs, ds.group, params, rounds=INCREMENT_ROUNDS, base=booster)
    if grown is None:
        return None
    new = ds.trained_on()
    trained_on = {
        **new,
        "min_id": info.trained_on.get("min_id", new["min_id"]),
        "count": int(info.trained_on.get("count") or info.n_records) + new["count"],
        "valid": int(info.trained_on.get("valid") or 0) + new["valid"],
        "continued_from": info.id,
        "new_records": new,
    }
    metrics = {
        "train_sec": round(time.perf_counter() - start, 3),
        "trees": grown.num_boosted_rounds(),
        "train_new": evaluate(score_rows(grown, ds.x), ds.secs, ds.group),
    }
    snap_id = _save(storage, target, grown, info.n_records + len(ds), trained_on, metrics)
    note = f"snapshot #{info.id} continued on {len(ds)} new records"
    log.info("cost model: %s", note)
    return BaseModel(grown, "continued", snap_id, note)


def _save(
    storage: Storage,
    target: TargetKey,
    booster: xgb.Booster,
    n_records: int,
    trained_on: dict[str, Any],
    metrics: dict[str, Any],
) -> int:
    """Save ``booster`` as the newest snapshot of ``target``'s kind and arch; its id."""
    return save_snapshot(
        storage,
        target_kind=target.kind,
        target_arch=target.arch,
        model_blob=to_bytes(booster),
        format_version=FORMAT_VERSION,
        xgboost_version=xgb.__version__,
        feature_version=FEATURE_VERSION,
        n_records=n_records,
        trained_on=trained_on,
        metrics=metrics,
        created_by=_user(),
    )


def score_rows(booster: xgb.Booster, x: np.ndarray) -> np.ndarray:
    return booster.predict(xgb.DMatrix(x), output_margin=True).astype(np.float64)


def incompatibility(info: Any) -> str | None:
    """Why a snapshot cannot be used here, or None."""
    if info.format_version != FORMAT_VERSION:
        return f"format version {info.format_version}, this TuneFarm reads {FORMAT_VERSION}"
    if info.feature_version != FEATURE_VERSION:
        return f"feature version {info.feature_version}, this TuneFarm computes {FEATURE_VERSION}"
    if info.tvm_version != tvm.__version__:
        return f"made with TVM {info.tvm_version}, this is TVM {tvm.__version__}"
    if _major(info.xgboost_version) > _major(xgb.__version__):
        return f"made with XGBoost {info.xgboost_version}, this is {xgb.__version__}"
    return None


def base_model(
    storage: Storage,
    target: TargetKey,
    params: RankerParams,
    *,
    train: bool = True,
    max_records: int = MAX_RECORDS,
) -> BaseModel:
    """The latest usable snapshot, else (with ``train``) a freshly trained and saved one."""
    found = latest_snapshot(storage, target.kind, target.arch)
    if found is not None:
        info, blob = found
        why = incompatibility(info)
        if why is None:
            after = int(info.trained_on.get("max_id") or 0)
            new, _ = record_stats(storage, target.kind, target.arch, after_id=after)
            if new > max(MIN_TRAIN_VALID, REFRESH_RATIO * info.n_records):
                why = f"{new} valid records added since it was trained"
                if train and INCREMENTAL:
                    grown = continue_base(storage, target, params, info, blob)
                    if grown is not None:
                        return grown
                log.info("cost model: snapshot #%d is stale (%s); retraining", info.id, why)
            else:
                try:
                    booster = from_bytes(blob)
                    note = f"snapshot #{info.id} ({info.n_records} records)"
                    return BaseModel(booster, "snapshot", info.id, note)
                except ValueError as err:
                    log.warning(
                        "cost model: snapshot #%d is corrupt (%s); training from records instead",
                        info.id,
                        err,
                    )
        else:
            log.warning(
                "cost model: snapshot #%d is incompatible (%s); training from records instead",
                info.id,
                why,
            )
    if not train:
        return BaseModel(None, "none", None, "no usable snapshot")
    count, _ = record_stats(storage, target.kind, target.arch)
    if count < MIN_TRAIN_VALID:
        return BaseModel(None, "none", None, f"{count} valid records: too few to pre-train")
    return train_base(storage, target, params, max_records=max_records)


def neighbour_weight(distance: float) -> float:
    """Group weight of a record from another bucket of the same kernel: 3 (close) .. 1 (far)."""
    return 1.0 + 2.0 / (1.0 + distance) if math.isfinite(distance) else 1.0


def related_data(
    storage: Storage, target: TargetKey, shashes: Sequence[str]
) -> tuple[Dataset | None, dict[str, float], dict[str, Any]]:
    """Stored records of the job's workloads and their bucket neighbours, with group weights.

    Returns the dataset (None when empty), group weights and buckets, both by workload shash.
    """
    rows = list(workload_summaries(storage).values())
    by_shash = {r.shash: r for r in rows}
    mine = [by_shash[s] for s in shashes if s in by_shash]
    weights: dict[str, float] = {s: SAME_WORKLOAD_WEIGHT for s in shashes}
    buckets: dict[str, Any] = {r.shash: r.bucket for r in rows}
    wids = {r.id for r in mine}
    for r in rows:
        if r.shash in weights or r.family is None:
            continue
        dists = [bucket_distance(r.bucket, buckets[m.shash]) for m in mine if m.family == r.family]
        if dists:
            weights[r.shash] = neighbour_weight(min(dists))
            wids.add(r.id)
    if not wids:
        return None, weights, buckets
    ds = load_dataset(storage, target, workload_ids=sorted(wids), max_records=MAX_LOCAL)
    return (ds if len(ds) else None), weights, buckets


def warm_model(
    storage: Storage,
    target: tvm.target.Target,
    mods: Sequence[tvm.IRModule],
    *,
    params: RankerParams | None = None,
    seed: int | None = None,
    warm: bool = True,
) -> tuple[TunefarmModel, str]:
    """TuneFarm's cost model for a job on ``mods``: base model plus weighted local data."""
    params = params or RankerParams(nthread=os.cpu_count() or 1, seed=seed or 0)
    key = TargetKey.of(target)
    shashes = [shash_of(m) for m in mods]
    base = base_model(storage, key, params) if warm else BaseModel(None, "none", None, "cold")
    local, weights, buckets = related_data(storage, key, shashes)
    model = TunefarmModel(
        base=base.booster, params=params, buckets=buckets, weights=weights, seed=seed
    )
    if local is not None:
        keys = [local.workloads[g].shash for g in local.group.tolist()]
        model.add_local(local.x, local.secs, keys)
        model.refit()
    note = f"base: {base.note}; local: {model.n_local} stored records"
    log.info("cost model: %s", note)
    return model, note


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 1 << 30  # unreadable: treat as newer than this XGBoost


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER")
