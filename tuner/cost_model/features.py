"""Features of candidate schedules: MetaSchedule's per-store features plus shape features.

A candidate has one per-store feature row per buffer store (164 numbers each, already
log-scaled by MetaSchedule). XGBoost's ranking objectives need one row per candidate, so the
rows are pooled (sum, mean, max, and the store count). The same pooled row minus that of the
workload's *unscheduled* module follows (what the schedule changed, on a scale that transfers
between buckets and kernels better than absolute counts), then the shape features of the
workload (FLOPs, buffer sizes, the shape bucket) so one model serves every bucket.

Features of stored records are recomputed by replaying their trace on the workload's module
(TVM's JSON forms, never pickles), so a model can be trained from any TuneFarm database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

# Bump when the feature layout changes: snapshots of another version are not loaded.
FEATURE_VERSION = 2
N_POOLED = 3 * 164 + 1
N_SHAPE = 6
WIDTH = 2 * N_POOLED + N_SHAPE  # pooled, pooled minus the unscheduled module's, shape


def extractor() -> PerStoreFeature:
    """MetaSchedule's per-store feature extractor with its default settings."""
    return PerStoreFeature(extract_workload=False)


def pool(per_store: np.ndarray) -> np.ndarray:
    """One row per candidate from its per-store rows: sum, mean, max and the store count."""
    if per_store.size == 0:
        width = per_store.shape[1] if per_store.ndim == 2 and per_store.shape[1] else 164
        return np.concatenate([np.zeros(3 * width, dtype=np.float32), [0.0]]).astype(np.float32)
    rows = per_store.astype(np.float32)
    return np.concatenate(
        [rows.sum(axis=0), rows.mean(axis=0), rows.max(axis=0), [np.log2(1 + len(rows))]]
    ).astype(np.float32)


def shape_features(mod: tvm.IRModule, bucket: Mapping[str, int] | None) -> np.ndarray:
    """Features of the workload's shapes: log FLOPs, log buffer elements and the bucket."""
    try:
        flops = float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:
        flops = 0.0
    elements = 0
    try:
        for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"]):
            shape = getattr(info, "shape", None) or ()
            elements += math.prod(
                int(d) if isinstance(d, (int, tvm.tirx.IntImm)) else 1 for d in shape
            )
    except Exception:
        elements = 0
    values = [max(1, int(v)) for v in (bucket or {}).values()]
    return np.array(
        [
            math.log2(1 + flops),
            math.log2(1 + elements),
            1.0 if values else 0.0,
            math.log2(math.prod(values)) if values else 0.0,
            math.log2(min(values)) if values else 0.0,
            math.log2(max(values)) if values else 0.0,
        ],
        dtype=np.float32,
    )


@dataclass(frozen=True)
class CandidateFeatures:
    """Features of a batch of candidates of one workload."""

    pooled: np.ndarray  # [n, WIDTH]: what our model reads
    per_store: list[np.ndarray]  # [stores, 164] each: what stock XGBModel reads


def reference(context: ms.TuneContext, fx: PerStoreFeature | None = None) -> np.ndarray:
    """Pooled features of the workload's unscheduled module (zeros if they cannot be
    extracted): the fixed point each candidate of the workload is compared with."""
    fx = fx or extractor()
    try:
        mod = context.mod
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        cand = ms.MeasureCandidate(tvm.s_tir.Schedule(mod), args)
        return pool(fx.extract_from(context, [cand])[0].numpy())
    except Exception:  # a workload the extractor cannot read unscheduled: no reference
        return np.zeros(N_POOLED, dtype=np.float32)


def featurize(
    context: ms.TuneContext,
    candidates: Sequence[ms.MeasureCandidate],
    shape: np.ndarray,
    fx: PerStoreFeature | None = None,
    ref: np.ndarray | None = None,
) -> CandidateFeatures:
    """Features of ``candidates`` of the task in ``context``; ``shape`` from shape_features,
    ``ref`` from :func:`reference` (computed here when not given)."""
    fx = fx or extractor()
    ref = reference(context, fx) if ref is None else ref
    per_store = [t.numpy().astype(np.float32) for t in fx.extract_from(context, list(candidates))]
    rows = [pool(p) for p in per_store]
    pooled = (
        np.stack([np.concatenate([r, r - ref, shape]) for r in rows])
        if rows
        else np.zeros((0, WIDTH), dtype=np.float32)
    )
    return CandidateFeatures(pooled=pooled.astype(np.float32), per_store=per_store)


def replay_candidates(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    traces: Sequence[tuple[str, str]],
) -> tuple[list[ms.MeasureCandidate], list[int]]:
    """Measure candidates rebuilt from stored (trace_json, args_info_json) pairs.

    Returns the candidates and the indices of the pairs that replayed; a trace that no longer
    applies (another TVM version) is skipped.
    """
    workload = Workload(mod)
    target_json = target.export()
    out, kept = [], []
    for i, (trace_json, args_json) in enumerate(traces):
        try:
            rec = TuningRecord.from_json(
                [json.loads(trace_json), None, target_json, json.loads(args_json)], workload
            )
            out.append(rec.as_measure_candidate())
            kept.append(i)
        except Exception:  # a stale trace is data we cannot use, not an error of the job
            continue
    return out, kept
