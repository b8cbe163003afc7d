"""Shared fixtures: real TVM kernels, real SQLite files, a real local Ray, one real tune.

PostgreSQL tests run against ``TUNEFARM_TEST_PG_URL``, else against the documented default
server (:data:`PG_DEFAULT_URL`, as ``.ci/run`` sets up) when it answers; the end of the run
names every group of skipped tests with the command that enables it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import te

DATA = Path(__file__).parent / "data"
TINY = DATA / "tiny_matmul.py"

PG_ENV = "TUNEFARM_TEST_PG_URL"
PG_DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"  # .ci/run's server


@functools.cache
def pg_probe() -> tuple[str | None, str]:
    """(URL of the test PostgreSQL server or None, where it came from or why there is none).

    ``TUNEFARM_TEST_PG_URL`` when set (used as is: a server that is down there fails the
    tests); else :data:`PG_DEFAULT_URL` when a connection succeeds within 2 s (once a session).
    """
    if os.environ.get(PG_ENV):
        return os.environ[PG_ENV], f"${PG_ENV}"
    try:
        import psycopg

        psycopg.connect(PG_DEFAULT_URL, connect_timeout=2).close()
    except Exception as err:  # any failure means "no server there"
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        return None, f"${PG_ENV} is unset and {PG_DEFAULT_URL} does not answer ({first})"
    return PG_DEFAULT_URL, "the documented default, probed"


def pytest_configure(config: pytest.Config) -> None:
    url, _ = pg_probe()
    if url:  # tests and their subprocesses that read the variable see the probed server
        os.environ.setdefault(PG_ENV, url)


def pytest_report_header(config: pytest.Config) -> str:
    url, why = pg_probe()
    return f"postgres: {_safe_url(url)} ({why})" if url else f"postgres: skipped, {why}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres") and pg_probe()[0] is None:
        pytest.skip(f"PostgreSQL: {pg_probe()[1]}")


def _safe_url(url: str | None) -> str:
    """``url`` without its password."""
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url or "")


# --------------------------------------------------------------------------- skipped groups
@dataclass(frozen=True)
class SkipGroup:
    """Skipped tests that one setup step enables: by marker, or by words of the reason."""

    name: str
    enable: str  # the command (or step) that makes them run
    markers: tuple[str, ...] = ()
    words: tuple[str, ...] = ()  # lowercase

    def matches(self, reason: str, keywords: Collection[str]) -> bool:
        low = reason.lower()
        return any(m in keywords for m in self.markers) or any(w in low for w in self.words)


def _pg_start_command() -> str:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    start = (
        f"pg_ctlcluster {versions[-1]} main start"
        if versions
        else "apt-get install postgresql && pg_ctlcluster <version> main start"
    )
    return f"{start} (serves {PG_DEFAULT_URL}), or export {PG_ENV}=postgresql://USER@HOST:PORT/DB"


SKIP_GROUPS = (
    SkipGroup("postgres", _pg_start_command(), markers=("postgres",)),
    SkipGroup(
        "arm/qemu",
        "dpkg --add-architecture arm64 && apt-get update && apt-get install qemu-user-static "
        "gcc-aarch64-linux-gnu g++-aarch64-linux-gnu (as .ci/run does)",
        words=("qemu", "aarch64", "cross toolchain"),
    ),
    SkipGroup(
        "gpu",
        "run on a machine with an NVIDIA GPU, its driver and CUDA 13 (the wheel's CUDA "
        "runtime then loads; python -m workers.gpu checks), and nvcc on PATH",
        markers=("gpu",),
        words=("no cuda", "nvcc", "gpu"),
    ),
    SkipGroup(
        "frontends",
        ".venv/bin/pip install -e '.[torch,onnx]' (make install does)",
        words=("could not import 'torch'", "could not import 'onnx'"),
    ),
)


def skip_reason(report: Any) -> str:
    """The reason of a skipped test or collection report."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_summary(reports: Iterable[Any], groups: Iterable[SkipGroup] = SKIP_GROUPS) -> list[str]:
    """One line per group of skipped tests, naming it and the command that enables it.

    A skip no group claims is listed by its own reason (such tests do not apply here)."""
    groups = list(groups)
    counts: dict[str, int] = {}
    enable: dict[str, str] = {}
    for report in reports:
        reason = skip_reason(report)
        keywords = set(getattr(report, "keywords", None) or ())
        group = next((g for g in groups if g.matches(reason, keywords)), None)
        name = group.name if group else f"other: {reason}"
        counts[name] = counts.get(name, 0) + 1
        enable[name] = group.enable if group else "nothing to enable"
    lines = []
    for name, n in counts.items():
        tests = f"{n} test{'s' if n != 1 else ''}"
        lines.append(f"{name} ({tests} skipped): {enable[name]}")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = skip_summary(terminalreporter.stats.get("skipped", []))
    if lines:
        terminalreporter.section("skipped groups and how to enable them")
        for line in lines:
            terminalreporter.write_line(line)


def matmul_mod(n: int = 16, k: int = 16, m: int = 16, block: str = "C") -> tvm.IRModule:
    """A small static matmul PrimFunc as a MetaSchedule-normalized module (its block named
    ``block``)."""
    from tuner.pipeline import normalize

    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name=block)
    return normalize(te.create_prim_func([a, b, c]))


def store_bucket_record(
    db: Any, bt: Any, family: str, trace: Any, sec: float, target: tvm.target.Target
) -> None:
    """Store ``trace`` for the bucket task ``bt`` as a tune would: its workload linked to the
    symbolic kernel's ``family`` (structural hash) and bucket, one record taking ``sec``."""
    from tvm.s_tir import meta_schedule as ms

    base = bt.task.name.split("[", 1)[0]
    db.workload_id(bt.task.mod, create=True, task_name=base, family=(family, bt.bucket))
    db.commit_tuning_record(
        ms.database.TuningRecord(
            trace,
            db.commit_workload(bt.task.mod),
            run_secs=[sec],
            target=target,
            args_info=ms.arg_info.ArgInfo.from_prim_func(bt.task.mod["main"]),
        )
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tf.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend (PostgreSQL: a private schema, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tf.db'}"
        return
    with pg_database() as url:
        yield url


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database on the test server, dropped after (skips without one)."""
    import uuid

    from sqlalchemy import create_engine, text

    base, why = pg_probe()
    if not base:
        pytest.skip(f"PostgreSQL: {why}")
    name = f"tf_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        base.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def llvm_target() -> tvm.target.Target:
    """The host CPU's target; MetaSchedule's tensor intrinsics imported the fast way, as a
    job does (a search state built first in a test process otherwise pays the slow import:
    53 s against 1 s here)."""
    from tuner.fastimport import preload_tensor_intrin
    from tuner.targets import resolve_target

    target = resolve_target("llvm")
    preload_tensor_intrin(target)
    return target


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
    # 10 default schedules + 38 searched
    tune(model.mod, llvm_target, Storage(url), config, model_name="dyn", buckets={"n": [4, 16]})
    # What the tests read is the build given a database, not the search's luck: on a busy
    # machine the default schedule can stay a bucket's best, and such a bucket gets no range
    # kernel. So each bucket's fastest searched schedule is made its best, and a second run of
    # the same job (its trials spent: no search) times the range kernels of the new bests.
    if _searched_bests(url, llvm_target):
        again = dataclasses.replace(config, retime=0)
        tune(model.mod, llvm_target, Storage(url), again, model_name="dyn", buckets={"n": [4, 16]})
    return url


def _searched_bests(url: str, target: tvm.target.Target) -> int:
    """Make each workload's fastest searched schedule its best, clearly faster than anything
    the build compares it with: a record of it with run times below every time the database
    holds (its records' and the generic code's: test data, enough samples to carry its pooled
    median) and, where the default schedule was the best, a verdict naming the searched one
    over it (the job's re-timing may have kept the default). Beside other work a tiny
    kernel's measured times are noise, and the build's choices follow them. Returns how many
    workloads got another best schedule (whose range kernels are then not timed yet)."""
    from sqlalchemy import func, select

    from database import Storage, TuneFarmDatabase, shash_of
    from database.models import GenericRun
    from database.verdicts import Verdict
    from tests.records import commit
    from tuner.symbolic.rangekernel import is_default
    from workers.fingerprint import local_device_for

    device = local_device_for(target)  # the job's runners are this machine's: the exact level
    storage = Storage(url, create=False)
    db = TuneFarmDatabase(storage, target, device=device)
    generic = storage.run(lambda s: s.scalar(select(func.min(GenericRun.mean_sec))), write=False)
    mods = {shash_of(r.workload.mod): r.workload.mod for r in db.get_all_tuning_records()}
    changed = 0
    for mod in mods.values():
        best = db.best(mod, target)  # as the build looks it up: this device's records first
        if best is None:
            continue
        ranked = db.top(mod, target, 1000)
        found = next(((h, r) for h, r, _ in ranked if not is_default(r.trace)), None)
        if found is None:
            continue
        (searched_hash, searched) = found
        low = 0.2 * min([s for _, _, ev in ranked for s in ev.secs] + [generic or math.inf])
        commit(db, mod, searched.trace, [low] * (len(searched.run_secs) + 1), device)
        if is_default(best[0].trace):
            # and the job's re-timing, which may have kept the default over it, decides again
            default_hash = next(h for h, r, _ in ranked if is_default(r.trace))
            verdict = Verdict(searched_hash, frozenset({searched_hash, default_hash}), rounds=1)
            db.add_verdict(mod, target, verdict)
            changed += 1
    return changed
