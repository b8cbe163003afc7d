"""Shared fixtures: real TVM kernels, real SQLite files, a real local Ray, one real tune."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import tvm
from tvm import te

DATA = Path(__file__).parent / "data"
TINY = DATA / "tiny_matmul.py"


def matmul_mod(n: int = 16, k: int = 16, m: int = 16) -> tvm.IRModule:
    """A small static matmul PrimFunc as a MetaSchedule-normalized module."""
    from tuner.pipeline import normalize

    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return normalize(te.create_prim_func([a, b, c]))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tf.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend (PostgreSQL: a private schema, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tf.db'}"
        return
    base = os.environ.get("TUNEFARM_TEST_PG_URL")
    if not base:
        pytest.skip("TUNEFARM_TEST_PG_URL is not set")
    import uuid

    from sqlalchemy import create_engine, text

    name = f"tf_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        base.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + f"/{name}"
    yield url

    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def llvm_target() -> tvm.target.Target:
    from tuner.targets import resolve_target

    return resolve_target("llvm")


@dataclass(frozen=True)
class TunedDB:
    url: str
    summary: object


@pytest.fixture(scope="session")
def tuned_db(tmp_path_factory: pytest.TempPathFactory, llvm_target: tvm.target.Target) -> TunedDB:
    """One real tune of the tiny matmul (8 trials, local Ray) into a SQLite file."""
    from database import Storage
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from workers.config import MeasureConfig

    url = f"sqlite:///{tmp_path_factory.mktemp('tuned') / 'tuned.db'}"
    model = load_model(TINY)
    config = TuneConfig(
        trials=8, trials_per_iter=8, seed=1, measure=MeasureConfig(min_repeat_ms=10, repeat=2)
    )
    summary = tune(model.mod, llvm_target, Storage(url), config, model_name="tiny")
    return TunedDB(url=url, summary=summary)


def crashing_mod() -> tvm.IRModule:
    """A kernel that builds but kills its process when run (an unresolved extern symbol)."""
    from tvm.script import tirx as T

    from tuner.pipeline import normalize

    @T.prim_func
    def crash(a: T.handle) -> None:
        A = T.match_buffer(a, (16,), "float32")
        for i in range(16):
            A[i] = T.call_extern("float32", "tunefarm_missing_symbol")

    return normalize(crash)


@pytest.fixture(scope="session")
def dyn_tuned_db(tmp_path_factory: pytest.TempPathFactory, llvm_target: tvm.target.Target) -> str:
    """The symbolic-kernel model tuned at buckets n=4 and n=16 (a few trials each)."""
    from database import Storage
    from tuner.job import TuneConfig, tune
    from tuner.model import load_model
    from workers.config import MeasureConfig

    url = f"sqlite:///{tmp_path_factory.mktemp('dyn') / 'dyn.db'}"
    model = load_model(DATA / "dyn_kernels.py")
    config = TuneConfig(
        trials=48, trials_per_iter=8, seed=0, measure=MeasureConfig(min_repeat_ms=5, repeat=2)
    )
    # 10 default schedules + 38 searched: enough that the search beats the default schedule of
    # the matmul kernels (a bucket whose best is the default gets no range kernel)
    tune(model.mod, llvm_target, Storage(url), config, model_name="dyn", buckets={"n": [4, 16]})
    return url
