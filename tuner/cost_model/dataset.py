"""Training data for the cost model, read from the schedule database.

Every record of a target kind and architecture (valid or failed) becomes one row: its
features (cached per record in ``record_features``, see :mod:`database.training`;
computed by replaying its trace on its workload when not cached), its mean latency (NaN
when it failed), its workload (the ranking group) and its record id (for chronological
splits).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from database import Storage, TargetKey
from database.training import (
    WorkloadSummary,
    read_features,
    record_traces,
    store_features,
    training_rows,
    workload_mods,
    workload_summaries,
)
from tuner.cost_model.features import (
    FEATURE_VERSION,
    WIDTH,
    extractor,
    featurize,
    replay_candidates,
    shape_features,
)
from tuner.fastimport import preload_tensor_intrin

log = logging.getLogger("tunefarm.cost_model")


@dataclass
class Dataset:
    """Rows of features with latencies (NaN = failed), ranking groups and record ids."""

    x: np.ndarray
    secs: np.ndarray
    group: np.ndarray
    record_id: np.ndarray
    per_store: list[np.ndarray] = field(default_factory=list)
    workloads: dict[int, WorkloadSummary] = field(default_factory=dict)
    replayed: int = 0  # records whose features were computed by replaying their trace
    cached: int = 0  # records whose features came from the record_features cache

    def __len__(self) -> int:
        return len(self.secs)

    @property
    def valid(self) -> np.ndarray:
        return np.isfinite(self.secs)

    def subset(self, mask: np.ndarray) -> Dataset:
        idx = np.flatnonzero(mask)
        return Dataset(
            x=self.x[idx],
            secs=self.secs[idx],
            group=self.group[idx],
            record_id=self.record_id[idx],
            per_store=[self.per_store[i] for i in idx] if self.per_store else [],
            workloads=self.workloads,
        )

    def trained_on(self) -> dict[str, Any]:
        """Which records these are: id range, count and a hash of the ids."""
        ids = np.sort(self.record_id)
        digest = hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]
        return {
            "min_id": int(ids[0]) if len(ids) else None,
            "max_id": int(ids[-1]) if len(ids) else None,
            "count": len(ids),
            "valid": int(self.valid.sum()),
            "workloads": len(set(self.group.tolist())),
            "ids_sha256": digest,
        }


def load_dataset(
    storage: Storage,
    target: TargetKey,
    *,
    workload_ids: list[int] | None = None,
    max_records: int | None = None,
    include_failed: bool = True,
    after_id: int = 0,
    cache: bool = True,
) -> Dataset:
    """Records of ``target``'s kind and arch with id > ``after_id`` as a dataset (the newest
    ``max_records``).

    Features come from the ``record_features`` cache; records without a usable cached row are
    replayed and featurized, and (with ``cache``) their features stored for the next load.
    """
    rows = training_rows(
        storage,
        target.kind,
        target.arch,
        workload_ids=workload_ids,
        max_records=max_records,
        include_failed=include_failed,
        after_id=after_id,
    )
    wl_of = {r[0]: r[1] for r in rows}
    sec_of = {r[0]: r[2] for r in rows}
    found = read_features(storage, list(wl_of), FEATURE_VERSION, WIDTH) if cache else {}
    feats: dict[int, tuple[np.ndarray, np.ndarray]] = {
        rid: (c.pooled, c.per_store) for rid, c in found.items() if c.workload_id == wl_of[rid]
    }
    missing = [rid for rid in wl_of if rid not in feats]
    infos = workload_summaries(storage, sorted(set(wl_of.values())))
    replayed, skipped = _replay(storage, missing, infos, feats) if missing else (0, 0)
    if replayed and cache:
        store_features(
            storage,
            ((rid, wl_of[rid], *feats[rid]) for rid in missing if rid in feats),
            FEATURE_VERSION,
        )
    if skipped:
        log.info("cost model: %d stored traces did not replay and were left out", skipped)
    ids = np.array(sorted(feats), dtype=np.int64)
    return Dataset(
        x=np.stack([feats[i][0] for i in ids.tolist()]).astype(np.float32, copy=False)
        if len(ids)
        else np.zeros((0, WIDTH), dtype=np.float32),
        secs=np.array(
            [np.nan if sec_of[i] is None else float(sec_of[i]) for i in ids.tolist()],
            dtype=np.float64,
        ),
        group=np.array([wl_of[i] for i in ids.tolist()], dtype=np.int64),
        record_id=ids,
        per_store=[feats[i][1] for i in ids.tolist()],
        workloads=infos,
        replayed=replayed,
        cached=len(ids) - replayed,
    )


def _replay(
    storage: Storage,
    ids: list[int],
    infos: dict[int, WorkloadSummary],
    out: dict[int, tuple[np.ndarray, np.ndarray]],
) -> tuple[int, int]:
    """Features of records ``ids`` by replaying their traces, into ``out``.

    Returns (records featurized, records whose trace did not replay).
    """
    by_wl: dict[int, list[Any]] = {}
    for row in record_traces(storage, ids):
        by_wl.setdefault(row[1], []).append(row)
    mods = workload_mods(storage, list(by_wl))
    fx = extractor()
    done = skipped = 0
    for wid, wrecs in by_wl.items():
        mod = tvm.ir.load_json(mods[wid])
        tgt = tvm.target.Target(json.loads(wrecs[0][4]))
        # TuneContext imports the registry (the slow path costs ~40 s); for a CPU target
        # without the CUDA intrinsics, most of its cost (tuner.fastimport)
        preload_tensor_intrin(tgt)
        cands, kept = replay_candidates(mod, tgt, [(r[2], r[3]) for r in wrecs])
        skipped += len(wrecs) - len(kept)
        if not cands:
            continue
        ctx = ms.TuneContext(mod=mod, target=tgt, num_threads=1)
        info = infos.get(wid)
        feats = featurize(ctx, cands, shape_features(mod, info.bucket if info else None), fx)
        for j, i in enumerate(kept):
            out[wrecs[i][0]] = (feats.pooled[j], feats.per_store[j])
            done += 1
    return done, skipped
