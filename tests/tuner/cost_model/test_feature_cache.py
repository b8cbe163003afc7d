"""The per-record feature cache: filled by the first load, serving the second without replay,
invalidated by the feature version, best effort on read-only databases, filled by a job."""

from __future__ import annotations

import json
import os
import uuid

import numpy as np
import pytest
import tvm
from sqlalchemy import create_engine, func, insert, select, text, update
from sqlalchemy.engine import make_url
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult

from database import Storage, TargetKey, shash_of
from database.models import RecordFeatures, RecordRow, WorkloadRow
from tuner.cost_model.dataset import Dataset, load_dataset
from tuner.cost_model.features import FEATURE_VERSION, replay_candidates
from tuner.cost_model.model import TunefarmModel
from tuner.fastimport import preload_tensor_intrin


def _copy_history(src: str, dst: str) -> Storage:
    """A TuneFarm database at ``dst`` holding ``src``'s workloads and records (ids kept)."""
    source = Storage(src, create=False)
    storage = Storage(dst)
    for table in (WorkloadRow.__table__, RecordRow.__table__):
        rows = [
            dict(r._mapping) for r in source.run(lambda s, t=table: list(s.execute(t.select())))
        ]
        for row in rows:
            row.pop("job_id", None)
        storage.run(lambda s, t=table, r=rows: s.execute(insert(t), r))
    return storage


def _cache_rows(storage: Storage) -> dict[int, int]:
    query = select(RecordFeatures.record_id, RecordFeatures.feature_version)
    return dict(storage.run(lambda s: list(s.execute(query))))


def _same(a: Dataset, b: Dataset) -> None:
    np.testing.assert_array_equal(a.record_id, b.record_id)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.secs, b.secs)
    np.testing.assert_array_equal(a.group, b.group)
    assert len(a.per_store) == len(b.per_store)
    for p, q in zip(a.per_store, b.per_store, strict=True):
        np.testing.assert_array_equal(p, q)


def _measured(
    storage: Storage, wid: int, mod: tvm.IRModule, target: tvm.target.Target
) -> tuple[list[ms.MeasureCandidate], list[RunnerResult]]:
    """The stored schedules of workload ``wid`` (each schedule's first record: a confirmation
    is another record of the same schedule) replayed as measured candidates, with results of
    their stored latency."""
    q = (
        select(RecordRow.trace_json, RecordRow.args_info_json, RecordRow.mean_sec)
        .where(RecordRow.workload_id == wid)
        .where(
            RecordRow.id.in_(
                select(func.min(RecordRow.id))
                .where(RecordRow.workload_id == wid)
                .group_by(RecordRow.target_key, RecordRow.candidate_hash)
            )
        )
    )
    recs = storage.run(lambda s: list(s.execute(q)))
    cands, kept = replay_candidates(mod, target, [(r[0], r[1]) for r in recs])
    return cands, [RunnerResult(run_secs=[recs[i][2] or 1.0], error_msg=None) for i in kept]


@pytest.fixture(scope="module")
def key(llvm_target) -> TargetKey:
    preload_tensor_intrin()
    return TargetKey.of(llvm_target)


@pytest.mark.slow
def test_second_load_is_served_from_the_cache(any_url, cm_db, key) -> None:
    storage = _copy_history(cm_db.url, any_url)
    first = load_dataset(storage, key)
    n = len(first)
    assert n >= 40 and first.replayed == n and first.cached == 0
    assert _cache_rows(storage) == {int(i): FEATURE_VERSION for i in first.record_id}
    second = load_dataset(Storage(any_url, create=False), key)
    assert second.replayed == 0 and second.cached == n
    _same(first, second)
    _same(first, load_dataset(storage, key, cache=False))  # equal to a fresh replay
    # a subset (the schedules measured last, a job's re-timing included; schedules first
    # measured after an id) is served from the cache too
    newest = load_dataset(storage, key, max_records=5)
    last = (
        select(func.min(RecordRow.id))
        .group_by(RecordRow.workload_id, RecordRow.target_key, RecordRow.candidate_hash)
        .order_by(func.max(RecordRow.id).desc())
        .limit(5)
    )
    expected = storage.run(lambda s: set(s.scalars(last)), write=False)
    assert newest.replayed == 0 and {int(i) for i in newest.record_id} == expected
    after = load_dataset(storage, key, after_id=int(first.record_id[-3]))
    assert after.replayed == 0 and list(after.record_id) == list(first.record_id[-2:])


@pytest.mark.slow
def test_feature_version_or_workload_change_invalidates(cm_db, key, sqlite_url) -> None:
    storage = _copy_history(cm_db.url, sqlite_url)
    first = load_dataset(storage, key)
    old, moved = (int(i) for i in first.record_id[:2])
    storage.run(
        lambda s: s.execute(
            update(RecordFeatures)
            .where(RecordFeatures.record_id == old)
            .values(feature_version=FEATURE_VERSION - 1, pooled=b"\0" * 8)
        )
    )
    storage.run(  # a cached row of another workload (a record moved by `db check --fix`)
        lambda s: s.execute(
            update(RecordFeatures).where(RecordFeatures.record_id == moved).values(workload_id=-1)
        )
    )
    again = load_dataset(storage, key)
    assert again.replayed == 2 and again.cached == len(first) - 2
    _same(first, again)
    assert _cache_rows(storage)[old] == FEATURE_VERSION  # the stale row was replaced
    assert load_dataset(storage, key).replayed == 0


@pytest.mark.slow
def test_read_only_sqlite_loads_without_caching(cm_db, key, tmp_path) -> None:
    path = tmp_path / "pack.db"
    _copy_history(cm_db.url, f"sqlite:///{path}").dispose()
    os.chmod(path, 0o444)
    ro = Storage(f"sqlite:///{path}", create=False)
    assert ro.read_only
    first = load_dataset(ro, key)
    assert len(first) >= 40 and first.replayed == len(first)
    assert _cache_rows(ro) == {}
    assert load_dataset(ro, key).replayed == len(first)  # still works, just not cached
    # a read-only copy of a database with a filled cache is served from it
    os.chmod(path, 0o644)
    load_dataset(Storage(f"sqlite:///{path}", create=False), key)
    os.chmod(path, 0o444)
    cached = load_dataset(Storage(f"sqlite:///{path}", create=False), key)
    assert cached.replayed == 0
    _same(first, cached)


@pytest.mark.slow
@pytest.mark.postgres
def test_read_only_postgres_role_loads_without_caching(cm_db, key, tmp_path) -> None:
    from tests.conftest import pg_database

    with pg_database() as url:
        storage = _copy_history(cm_db.url, url)
        n = len(load_dataset(storage, key, cache=False))
        role = f"tf_ro_{uuid.uuid4().hex[:8]}"
        admin = create_engine(make_url(storage.engine.url), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            conn.execute(text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
        try:
            ro_url = make_url(url).set(username=role, password=None)
            ro = Storage(ro_url.render_as_string(hide_password=False), create=False)
            first = load_dataset(ro, key)
            assert len(first) == n and first.replayed == n
            assert _cache_rows(storage) == {}  # the insert was refused, and logged
            ro.dispose()
        finally:
            storage.dispose()
            with admin.connect() as conn:
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
            admin.dispose()


@pytest.mark.slow
def test_model_caches_the_features_of_measured_candidates(cm_db, key, llvm_target, sqlite_url):
    """What the job does after its search: the cost model stores the features it computed for
    its measured candidates against their records; they equal a replay's."""
    storage = _copy_history(cm_db.url, sqlite_url)
    query = select(WorkloadRow.id, WorkloadRow.mod_json, WorkloadRow.bucket_json)
    workloads = storage.run(lambda s: list(s.execute(query)))
    model = TunefarmModel(buckets={})
    measured = 0
    for wid, mod_json, bucket_json in workloads:
        mod = tvm.ir.load_json(mod_json)
        model.buckets[shash_of(mod)] = json.loads(bucket_json) if bucket_json else None
        cands, results = _measured(storage, wid, mod, llvm_target)
        ctx = ms.TuneContext(mod=mod, target=llvm_target, space_generator="post-order-apply")
        model.update(ctx, cands, results)
        measured += len(cands)
    # every record of a measured schedule gets its features (a confirmation's too)
    assert model.store_features(storage, llvm_target) >= measured
    cached = load_dataset(storage, key)
    assert cached.replayed == 0 and len(cached) == measured
    replayed = load_dataset(storage, key, cache=False)
    np.testing.assert_allclose(cached.x, replayed.x, rtol=1e-6, atol=1e-6)
    for p, q in zip(cached.per_store, replayed.per_store, strict=True):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_model_featurizes_each_candidate_once(cm_db, key, llvm_target, monkeypatch) -> None:
    """The evolutionary search scores candidates it has scored before and ``update`` the
    measured ones again: the model featurizes each (workload, schedule) once, with the same
    rows as featurizing afresh, and keeps at most FEATURE_CACHE_SIZE of them."""
    from tuner.cost_model import model as model_mod
    from tuner.cost_model.features import featurize, reference, shape_features

    storage = Storage(cm_db.url, create=False)
    wid, mod_json = storage.run(
        lambda s: s.execute(select(WorkloadRow.id, WorkloadRow.mod_json)).first()
    )
    mod = tvm.ir.load_json(mod_json)
    cands, results = _measured(storage, wid, mod, llvm_target)
    assert len(cands) >= 8
    ctx = ms.TuneContext(mod=mod, target=llvm_target, space_generator="post-order-apply")
    model = TunefarmModel(buckets={shash_of(mod): None}, min_samples=8)
    model.update(ctx, cands, results)  # featurizes every candidate, then trains
    assert model.ranker is not None and model.cache_hits == 0
    first = model.predict(ctx, cands)  # all cached by the update
    assert model.cache_hits == len(cands)
    fresh = featurize(ctx, cands, shape_features(mod, None), ref=reference(ctx))
    _, _, cached = model._features(ctx, cands)
    np.testing.assert_array_equal(cached.pooled, fresh.pooled)
    np.testing.assert_array_equal(model.predict(ctx, cands), first)

    monkeypatch.setattr(model_mod, "FEATURE_CACHE_SIZE", 4)
    model.predict(ctx, cands[:6])
    assert len(model._cache) == 4
    hits = model.cache_hits
    model.predict(ctx, cands[2:6])  # the 4 most recently used stayed
    assert model.cache_hits == hits + 4
