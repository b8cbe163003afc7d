"""A real small tune of a matmul family at two shape buckets, the cost model's training data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import tvm

CM_MATMUL = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "cm_matmul.py"


@dataclass(frozen=True)
class CostModelDB:
    url: str
    path: Path


@pytest.fixture(scope="session")
def cm_db(tmp_path_factory: pytest.TempPathFactory, llvm_target: tvm.target.Target) -> CostModelDB:
    """cm_matmul tuned at n=8 and n=32 (stock cost model, 40 trials, local Ray) into SQLite."""
    from database import Storage
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from workers.config import MeasureConfig

    path = tmp_path_factory.mktemp("cm") / "cm.db"
    url = f"sqlite:///{path}"
    model = load_model(CM_MATMUL)
    config = TuneConfig(
        trials=40,
        trials_per_iter=8,
        seed=0,
        measure=MeasureConfig(min_repeat_ms=5, repeat=2),
        cost_model="xgb",
    )
    tune(model.mod, llvm_target, Storage(url), config, model_name="cm", buckets={"n": [8, 32]})
    return CostModelDB(url=url, path=path)
