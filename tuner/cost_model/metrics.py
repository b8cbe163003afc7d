"""Ranking metrics of a cost model, as defined by TenSet (Zheng et al., NeurIPS 2021).

All metrics are computed per workload (a group), on its valid candidates, then averaged over
the workloads that have at least two valid candidates; ``throughput = 1 / latency``.

- pairwise accuracy: share of pairs of candidates with different latencies that the model
  orders correctly (pooled over all pairs of all workloads, as TenSet does);
- top-k recall: ``|top-k by prediction ∩ top-k by measurement| / k``;
- peak score@k: best throughput among the model's top k divided by the best throughput of the
  workload (1.0: the best candidate is among the k the model would measure).
"""

from __future__ import annotations

from typing import Any

import numpy as np

KS = (1, 5, 10)


def evaluate(
    pred: np.ndarray, secs: np.ndarray, group: np.ndarray, ks: tuple[int, ...] = KS
) -> dict[str, Any]:
    """Metrics of predicted scores (higher = faster) against measured latencies."""
    valid = np.isfinite(secs)
    pairs_right = pairs_total = 0
    recall: dict[int, list[float]] = {k: [] for k in ks}
    peak: dict[int, list[float]] = {k: [] for k in ks}
    groups = 0
    for g in np.unique(group[valid]):
        idx = np.flatnonzero((group == g) & valid)
        if len(idx) < 2:
            continue
        groups += 1
        p, t = pred[idx], 1.0 / secs[idx]
        dp = p[:, None] - p[None, :]
        dt = t[:, None] - t[None, :]
        upper = np.triu(np.ones_like(dt, dtype=bool), 1) & (dt != 0)
        pairs_right += int(((dp * dt) > 0)[upper].sum())
        pairs_total += int(upper.sum())
        by_pred = np.argsort(-p, kind="stable")
        by_true = np.argsort(-t, kind="stable")
        for k in ks:
            kk = min(k, len(idx))
            recall[k].append(len(set(by_pred[:kk]) & set(by_true[:kk])) / kk)
            peak[k].append(float(t[by_pred[:kk]].max() / t.max()))
    out: dict[str, Any] = {
        "pairwise_accuracy": pairs_right / pairs_total if pairs_total else None,
        "pairs": pairs_total,
        "workloads": groups,
        "rows": int(valid.sum()),
    }
    for k in ks:
        out[f"recall@{k}"] = float(np.mean(recall[k])) if recall[k] else None
        out[f"peak@{k}"] = float(np.mean(peak[k])) if peak[k] else None
    return out
