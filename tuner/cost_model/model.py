"""TuneFarm's cost model behind MetaSchedule's ``PyCostModel`` interface.

The model is a generic *base* ranker (trained on every record of the target kind and arch,
usually loaded from the latest database snapshot) plus an *online* correction: after every
measured batch, a few boosting rounds are fitted on top of the base on the job's local data
(its own measurements and the stored records of its workloads and nearby buckets, weighted).
Without a base and before ``min_samples`` valid measurements it predicts at random, like
stock MetaSchedule before its warm-up.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import tvm
import xgboost as xgb
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.runner import RunnerResult

from database import Storage, TargetKey, shash_of
from database.errors import DatabaseError
from database.training import records_of_candidates, store_features
from tuner.cost_model.features import (
    FEATURE_VERSION,
    WIDTH,
    CandidateFeatures,
    extractor,
    featurize,
    reference,
    shape_features,
)
from tuner.cost_model.ranker import (
    RankerParams,
    fit_ranker,
    fit_validity,
    from_bytes,
    score,
    to_bytes,
)

log = logging.getLogger("tunefarm.cost_model")

SAME_WORKLOAD_WEIGHT = 4.0

# Candidates whose features a model keeps (least recently used out). The evolutionary search
# scores its whole population every generation and mutations often land on a schedule it has
# already scored (16% of a 64-trial QKV job's candidates); the measured ones are featurized
# again by ``update``. A few KB each.
FEATURE_CACHE_SIZE = 8192

# An update continues the last fit with CONTINUE_ROUNDS boosting rounds over all local rows
# (the new trees fit what the last ones got wrong, new rows included) until the valid rows
# have grown REFIT_GROWTH-fold since the last full fit, which then refits from the base. A
# full fit of every update retrained 150 rounds per round of 4 candidates: 60% of the search
# thread's time in an 18-task transformer job, taken from the builds on the same cores.
CONTINUE_ROUNDS = 20
REFIT_GROWTH = 1.25


def result_secs(result: RunnerResult) -> float:
    """Mean latency of a runner result; NaN when the candidate failed."""
    secs = [float(s) for s in (result.run_secs or [])]
    if result.error_msg is not None or not secs or any(not 0 < s < 1e9 for s in secs):
        return float("nan")
    return float(np.mean(secs))


@derived_object
class TunefarmModel(PyCostModel):
    """XGBoost pairwise ranker on per-store + shape features, warm-startable, online."""

    def __init__(
        self,
        *,
        base: xgb.Booster | None = None,
        params: RankerParams | None = None,
        buckets: Mapping[str, Mapping[str, int] | None] | None = None,
        weights: Mapping[str, float] | None = None,
        min_samples: int = 16,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        self.params = params or RankerParams()
        self.base = base
        self.buckets = dict(buckets or {})  # workload shash -> shape bucket
        self.weights = dict(weights or {})  # workload shash -> ranking-group weight
        self.min_samples = min_samples
        self.rng = np.random.default_rng(seed)
        self.fx = extractor()
        self._x: list[np.ndarray] = []
        self._secs: list[float] = []
        self._keys: list[str] = []
        self._shape: dict[str, np.ndarray] = {}
        self._ref: dict[str, np.ndarray] = {}  # the unscheduled module's pooled features
        self.ranker: xgb.Booster | None = base
        self.validity: xgb.Booster | None = None
        self.updates = 0
        # the online part (None: none fitted yet) and the valid rows its last full fit saw
        self._online: xgb.Booster | None = None
        self._full_fit_rows = 0
        self.full_fits = 0
        # the rows the last update added: what copies of this model elsewhere (other search
        # actors) take with add_local, so every copy learns from every task
        self.last_rows: tuple[np.ndarray, np.ndarray, list[str]] | None = None
        # features of measured candidates by (workload shash, candidate hash), kept until
        # store_features caches them for the records the job wrote
        self._measured: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        # features by (workload shash, candidate hash): see FEATURE_CACHE_SIZE
        self._cache: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.cache_hits = 0

    # ------------------------------------------------------------------ data
    def add_local(self, x: np.ndarray, secs: np.ndarray, keys: list[str]) -> None:
        """Add rows to the local (job) data without refitting."""
        self._x.extend(np.asarray(x, dtype=np.float32))
        self._secs.extend(float(s) for s in secs)
        self._keys.extend(keys)

    @property
    def n_local(self) -> int:
        return len(self._secs)

    def refit(self, full: bool = False) -> None:
        """Fit the online part to the local data (on top of the base when there is one): from
        the base when ``full`` or when the valid rows have grown :data:`REFIT_GROWTH`-fold since
        the last full fit, else by continuing the last fit (:data:`CONTINUE_ROUNDS`)."""
        if not self._secs:
            return
        secs = np.asarray(self._secs)
        n_valid = int(np.isfinite(secs).sum())
        if self.base is None and n_valid < self.min_samples:
            return
        names = sorted(set(self._keys))
        index = {k: i for i, k in enumerate(names)}
        group = np.array([index[k] for k in self._keys], dtype=np.int64)
        x = np.stack(self._x)
        weights = {index[k]: self.weights.get(k, SAME_WORKLOAD_WEIGHT) for k in names}
        full = full or self._online is None or n_valid >= REFIT_GROWTH * self._full_fit_rows
        if full:  # a fixed number of rounds on top of the base, or a fit from scratch
            start = self.base
            rounds = self.params.online_rounds if start is not None else None
        else:
            rounds, start = CONTINUE_ROUNDS, self._online
        online = fit_ranker(
            x, secs, group, self.params, group_weight=weights, rounds=rounds, base=start
        )
        if full:
            self._full_fit_rows = n_valid
            self.full_fits += 1
        self._online = online or self._online
        self.ranker = self._online or self.base
        self.validity = fit_validity(x, secs, self.params)

    def _features(
        self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]
    ) -> tuple[str, list[str], CandidateFeatures]:
        """The workload's key, each candidate's hash and their features; only candidates
        not in the cache are featurized."""
        key = shash_of(context.mod)
        if key not in self._shape:
            self._shape[key] = shape_features(context.mod, self.buckets.get(key))
            self._ref[key] = reference(context, self.fx)
        hashes = [shash_of(c.sch.mod) for c in candidates]
        missing = {
            h: c for h, c in zip(hashes, candidates, strict=True) if (key, h) not in self._cache
        }
        if missing:
            new = featurize(
                context, list(missing.values()), self._shape[key], self.fx, self._ref[key]
            )
            for h, row, stores in zip(missing, new.pooled, new.per_store, strict=True):
                self._cache[(key, h)] = (np.array(row), stores)
        self.cache_hits += len(hashes) - len(missing)
        found = []
        for h in hashes:
            self._cache.move_to_end((key, h))
            found.append(self._cache[(key, h)])
        while len(self._cache) > FEATURE_CACHE_SIZE:
            self._cache.popitem(last=False)
        pooled = (
            np.stack([row for row, _ in found]) if found else np.zeros((0, WIDTH), dtype=np.float32)
        )
        return key, hashes, CandidateFeatures(pooled=pooled, per_store=[st for _, st in found])

    def store_features(self, storage: Storage, target: tvm.target.Target) -> int:
        """Cache the features of the measured candidates that are records of ``storage`` for
        ``target`` (the job's own records), so the next warm start need not replay them.

        Best effort (see :func:`database.training.store_features`); returns rows stored.
        """
        if not self._measured or storage.read_only:
            return 0
        hashes = sorted({c for _, c in self._measured})
        try:
            rows = records_of_candidates(storage, TargetKey.of(target).key, hashes)
        except DatabaseError as err:
            log.info("cost model: features not cached (%s)", err)
            return 0
        found = [
            (rid, wid, *self._measured[(shash, chash)])
            for rid, wid, shash, chash in rows
            if (shash, chash) in self._measured
        ]
        return store_features(storage, found, FEATURE_VERSION)

    # ------------------------------------------------------------------ shipping
    def state(self, nthread: int | None = None) -> dict[str, Any]:
        """Everything needed to rebuild this model elsewhere (a search actor): plain data.

        ``nthread``: the XGBoost threads of the copy (its node's share of cores)."""
        params = self.params if nthread is None else replace(self.params, nthread=nthread)
        return {
            "params": params,
            "base": to_bytes(self.base) if self.base is not None else None,
            "ranker": to_bytes(self.ranker) if self.ranker is not None else None,
            "online": self._online is not None,
            "full_fit_rows": self._full_fit_rows,
            "validity": to_bytes(self.validity) if self.validity is not None else None,
            "buckets": self.buckets,
            "weights": self.weights,
            "min_samples": self.min_samples,
            "x": np.stack(self._x) if self._x else None,
            "secs": np.asarray(self._secs, dtype=np.float64),
            "keys": list(self._keys),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], seed: int | None = None) -> TunefarmModel:
        """The model :meth:`state` describes, fitted as it was (no refit)."""
        base = from_bytes(state["base"]) if state["base"] is not None else None
        model = cls(
            base=base,
            params=state["params"],
            buckets=state["buckets"],
            weights=state["weights"],
            min_samples=state["min_samples"],
            seed=seed,
        )
        if state["x"] is not None:
            model.add_local(state["x"], state["secs"], state["keys"])
        model.ranker = from_bytes(state["ranker"]) if state["ranker"] is not None else None
        if state.get("online"):
            model._online = model.ranker
            model._full_fit_rows = int(state.get("full_fit_rows", 0))
        model.validity = from_bytes(state["validity"]) if state["validity"] is not None else None
        return model

    def measured_features(self) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
        """Features of the candidates this model was updated with, by (workload, candidate)."""
        return dict(self._measured)

    def add_measured(
        self, measured: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]]
    ) -> None:
        """Take features measured by copies of this model (search actors), for
        :meth:`store_features`."""
        self._measured.update(measured)

    # ------------------------------------------------------------------ interface
    def load(self, path: str) -> None:
        with open(path, "rb") as f:
            self.base = from_bytes(f.read())
        self.ranker = self.base
        self._online = None
        self.refit(full=True)

    def save(self, path: str) -> None:
        if self.ranker is None:
            raise ValueError("the cost model has not been trained yet")
        with open(path, "wb") as f:
            f.write(to_bytes(self.ranker))

    def update(
        self,
        context: ms.TuneContext,
        candidates: list[ms.MeasureCandidate],
        results: list[RunnerResult],
    ) -> None:
        if not candidates:
            return
        key, hashes, feats = self._features(context, candidates)
        x = feats.pooled
        if len(x) != len(results):
            return
        for chash, row, stores in zip(hashes, x, feats.per_store, strict=True):
            self._measured[(key, chash)] = (row, stores)
        secs = np.array([result_secs(r) for r in results])
        self.add_local(x, secs, [key] * len(x))
        self.last_rows = (np.asarray(x, dtype=np.float32), secs, [key] * len(x))
        self.updates += 1
        self.refit()

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        if self.ranker is None:
            return self.rng.uniform(size=len(candidates)).astype("float64")
        _, _, feats = self._features(context, candidates)
        return score(self.ranker, self.validity, feats.pooled).astype("float64")
