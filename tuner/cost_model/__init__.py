"""Cost models for the search, by name: ``tunefarm`` (ours), ``xgb`` (stock), ``random``."""

from __future__ import annotations

import os
from collections.abc import Sequence

import tvm
from tvm.s_tir import meta_schedule as ms

from database import Storage
from tuner.errors import TuneFarmError

COST_MODELS = ("tunefarm", "xgb", "random")


def check_name(name: str) -> str:
    """``name`` when it is a known cost model; else a one-line error listing the valid ones."""
    if name not in COST_MODELS:
        raise TuneFarmError(f"unknown cost model {name!r}; valid: {', '.join(COST_MODELS)}")
    return name


def create_cost_model(
    name: str,
    *,
    storage: Storage,
    target: tvm.target.Target,
    mods: Sequence[tvm.IRModule],
    seed: int | None = None,
    warm: bool = True,
) -> tuple[ms.CostModel, str]:
    """The cost model ``name`` for a job on ``mods``, and a one-line note of how it started."""
    threads = os.cpu_count() or 1
    check_name(name)
    if name == "xgb":
        return ms.CostModel.create("xgb", num_tuning_cores=threads), "stock XGBModel (cold)"
    if name == "random":
        return ms.CostModel.create("random", seed=seed), "random"
    from tuner.cost_model.warm import warm_model

    return warm_model(storage, target, mods, seed=seed, warm=warm)


__all__ = ["COST_MODELS", "check_name", "create_cost_model"]
