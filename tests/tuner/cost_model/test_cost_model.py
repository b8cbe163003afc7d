"""TuneFarm's cost model on records of a real tune: training, evaluation, snapshots in SQLite
and PostgreSQL, fallback on bad snapshots, the CLI, and a warm-started job against a cold one."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import xgboost as xgb
from sqlalchemy import select
from typer.testing import CliRunner

from benchmarks.cost_model import copy_sqlite
from database import Storage, TargetKey
from database.models import RecordRow
from database.snapshots import latest_snapshot, list_snapshots, save_snapshot
from tests.conftest import TINY
from tests.tuner.cost_model.conftest import CM_MATMUL
from tuner.cli import app
from tuner.cost_model import check_name
from tuner.cost_model.dataset import load_dataset
from tuner.cost_model.evaluate import compare
from tuner.cost_model.features import FEATURE_VERSION
from tuner.cost_model.metrics import evaluate
from tuner.cost_model.model import CONTINUE_ROUNDS, REFIT_GROWTH, TunefarmModel
from tuner.cost_model.ranker import FORMAT_VERSION, RankerParams, fit_ranker, from_bytes, to_bytes
from tuner.cost_model.warm import INCREMENT_ROUNDS, MAX_TREES_RATIO, base_model, score_rows
from tuner.errors import TuneFarmError
from tuner.job import TuneConfig, tune
from tuner.model import load_model
from workers.config import MeasureConfig

runner = CliRunner()
PARAMS = RankerParams(nthread=2)


@pytest.fixture(scope="module")
def dataset(cm_db, llvm_target):
    from tuner.fastimport import preload_tensor_intrin

    preload_tensor_intrin()
    return load_dataset(Storage(cm_db.url, create=False), TargetKey.of(llvm_target))


def _snapshot(storage: Storage, blob: bytes, **over) -> int:
    fields = {
        "target_kind": "llvm",
        "target_arch": None,
        "model_blob": blob,
        "format_version": FORMAT_VERSION,
        "xgboost_version": xgb.__version__,
        "feature_version": FEATURE_VERSION,
        "n_records": 1000,
        "trained_on": {"max_id": 10**9, "count": 1000},
        "metrics": {"note": "test"},
        "created_by": "test",
    }
    return save_snapshot(storage, **(fields | over))


# ---------------------------------------------------------------------- pure parts
def test_metrics_follow_tenset_definitions() -> None:
    secs = np.array([1.0, 2.0, 4.0, 8.0, np.nan, 1.0, 3.0])
    group = np.array([0, 0, 0, 0, 0, 1, 1])
    perfect = evaluate(1.0 / np.nan_to_num(secs, nan=1e9), secs, group, ks=(1, 2))
    assert perfect["pairwise_accuracy"] == 1.0 and perfect["workloads"] == 2
    assert perfect["recall@1"] == 1.0 and perfect["peak@1"] == 1.0
    worst = evaluate(np.nan_to_num(secs, nan=0.0), secs, group, ks=(1, 2))
    assert worst["pairwise_accuracy"] == 0.0
    # the model's top-1 is the slowest: peak@1 = mean(1/8 / 1, 1/3 / 1)
    assert worst["peak@1"] == pytest.approx((1 / 8 + 1 / 3) / 2)
    # group 1 has two candidates: its top 2 are everything
    assert worst["recall@2"] == 0.5 and worst["peak@2"] == pytest.approx((1 / 4 + 1) / 2)


def test_cost_models_by_name() -> None:
    assert check_name("tunefarm") == "tunefarm"
    with pytest.raises(TuneFarmError, match="valid: tunefarm, xgb, random"):
        check_name("gbdt")
    with pytest.raises(TuneFarmError, match="unknown cost model 'gbdt'"):
        TuneConfig(trials=4, cost_model="gbdt")


# ---------------------------------------------------------------------- real records
@pytest.mark.slow
def test_features_and_training_on_real_records(dataset) -> None:
    assert len(dataset) >= 40 and dataset.valid.sum() >= 40
    assert len(set(dataset.group.tolist())) == 2  # the n=8 and n=32 workloads
    assert dataset.x.shape[1] == 2 * (3 * 164 + 1) + 6
    buckets = {tuple(w.bucket.items()) for w in dataset.workloads.values()}
    assert buckets == {(("n", 8),), (("n", 32),)}
    # the shape features tell the buckets apart
    assert len({tuple(r[-6:]) for r in dataset.x}) == 2
    booster = fit_ranker(dataset.x, dataset.secs, dataset.group, PARAMS)
    assert booster is not None
    train = evaluate(score_rows(booster, dataset.x), dataset.secs, dataset.group)
    assert train["pairwise_accuracy"] > 0.9


@pytest.mark.slow
def test_eval_against_stock_and_random(dataset) -> None:
    result = compare(dataset, PARAMS)
    assert set(result) == {"tunefarm", "stock_xgb", "random"}
    for res in result.values():
        for split in ("chronological", "leave_one_workload_out"):
            assert res[split]["pairs"] > 0 and 0 <= res[split]["pairwise_accuracy"] <= 1
            assert 0 < res[split]["peak@5"] <= 1
    assert result["tunefarm"]["chronological"]["folds"] == 1
    assert result["tunefarm"]["leave_one_workload_out"]["folds"] == 2  # one per bucket
    # No held-out quality bound here: on the ~40 records of this small tune, held-out pair order
    # is mostly timing noise (a 70/30 split gave ours 6/24 on one seed and 24/27 on the next).
    # Quality is asserted on measured outcomes by test_warm_job_proposes_better_first_batch and
    # compared with stock XGBModel by the cost-model benchmark on a larger history.


@pytest.mark.slow
def test_online_updates_continue_the_last_fit_until_the_rows_grow(dataset) -> None:
    """An update adds CONTINUE_ROUNDS trees to the last fit, over every local row; once the
    valid rows have grown REFIT_GROWTH-fold since the last full fit, it refits from scratch.
    Copies made from its state continue where it stood."""
    params = RankerParams(nthread=2, rounds=30)
    valid = np.flatnonzero(dataset.valid)
    order = valid[np.argsort(dataset.record_id[valid])]
    keys = [str(g) for g in dataset.group]

    def add(model: TunefarmModel, rows: np.ndarray) -> None:
        model.add_local(dataset.x[rows], dataset.secs[rows], [keys[i] for i in rows])

    model = TunefarmModel(params=params, min_samples=16, seed=0)
    add(model, order[:20])
    model.refit()
    assert model.full_fits == 1 and model.ranker.num_boosted_rounds() == 30
    add(model, order[20:23])  # 23 < 1.25 * 20: continued on all 23 rows
    model.refit()
    assert model.full_fits == 1 and model.ranker.num_boosted_rounds() == 30 + CONTINUE_ROUNDS
    add(model, order[23 : int(np.ceil(REFIT_GROWTH * 20))])  # grown 1.25-fold: a full fit
    model.refit()
    assert model.full_fits == 2 and model.ranker.num_boosted_rounds() == 30

    copy = TunefarmModel.from_state(model.state(), seed=1)
    add(copy, order[25:27])
    copy.refit()
    assert copy.full_fits == 0 and copy.ranker.num_boosted_rounds() == 30 + CONTINUE_ROUNDS
    copy.refit(full=True)
    assert copy.full_fits == 1 and copy.ranker.num_boosted_rounds() == 30
    seen = order[:27]
    fit = evaluate(
        score_rows(copy.ranker, dataset.x[seen]), dataset.secs[seen], dataset.group[seen]
    )
    assert fit["pairwise_accuracy"] > 0.8


# ---------------------------------------------------------------------- snapshots
@pytest.mark.slow
def test_snapshot_round_trip(any_url, dataset, tmp_path) -> None:
    booster = fit_ranker(dataset.x, dataset.secs, dataset.group, PARAMS)
    storage = Storage(any_url)
    assert latest_snapshot(storage, "llvm", None) is None
    first = _snapshot(storage, b"old")
    snap_id = _snapshot(storage, to_bytes(booster), trained_on=dataset.trained_on())
    assert snap_id > first
    info, blob = latest_snapshot(Storage(any_url, create=False), "llvm", None)
    assert info.id == snap_id and info.trained_on["count"] == len(dataset)
    assert info.tvm_version and info.xgboost_version == xgb.__version__
    assert info.metrics == {"note": "test"} and info.created_by == "test"
    loaded = from_bytes(blob)
    np.testing.assert_array_equal(score_rows(loaded, dataset.x), score_rows(booster, dataset.x))
    assert [s.id for s in list_snapshots(storage, "llvm", None)] == [snap_id, first]
    assert list_snapshots(storage, "cuda", "sm_90") == []
    # the PyCostModel save/load interface writes XGBoost's own UBJSON file
    model = TunefarmModel(base=loaded)
    path = tmp_path / "model.ubj"
    model.save(str(path))
    again = TunefarmModel()
    again.load(str(path))
    np.testing.assert_array_equal(
        score_rows(again.ranker, dataset.x), score_rows(booster, dataset.x)
    )


@pytest.mark.slow
def test_bad_snapshots_fall_back_to_training(cm_db, llvm_target, tmp_path, caplog) -> None:
    path = tmp_path / "copy.db"
    copy_sqlite(cm_db.path, path)
    storage = Storage(f"sqlite:///{path}")
    key = TargetKey.of(llvm_target)
    arch = {"target_kind": key.kind, "target_arch": key.arch}
    caplog.set_level(logging.INFO, logger="tunefarm.cost_model")

    corrupt = _snapshot(storage, b"\x00not an xgboost model", **arch)
    base = base_model(storage, key, PARAMS)
    assert base.source == "trained" and base.booster is not None
    assert f"snapshot #{corrupt} is corrupt" in caplog.text
    assert base.snapshot_id > corrupt  # the retrained model is the new latest snapshot

    caplog.clear()
    old = _snapshot(storage, to_bytes(base.booster), feature_version=FEATURE_VERSION + 1, **arch)
    again = base_model(storage, key, PARAMS)
    assert again.source == "trained" and f"snapshot #{old} is incompatible" in caplog.text

    reuse = base_model(storage, key, PARAMS)
    assert reuse.source == "snapshot" and reuse.snapshot_id == again.snapshot_id


@pytest.mark.slow
def test_stale_snapshot_is_continued_on_new_records(cm_db, llvm_target, tmp_path) -> None:
    """A snapshot trained on the older half is continued (not retrained) on the newer half."""
    path = tmp_path / "copy.db"
    copy_sqlite(cm_db.path, path)
    storage = Storage(f"sqlite:///{path}")
    key = TargetKey.of(llvm_target)
    full = load_dataset(storage, key)
    mid = int(full.record_id[len(full) // 2 - 1])
    old = full.subset(full.record_id <= mid)
    booster = fit_ranker(old.x, old.secs, old.group, PARAMS)
    first = _snapshot(
        storage,
        to_bytes(booster),
        target_kind=key.kind,
        target_arch=key.arch,
        n_records=len(old),
        trained_on=old.trained_on(),
    )
    grown = base_model(storage, key, PARAMS)
    assert grown.source == "continued" and grown.snapshot_id > first
    assert grown.booster.num_boosted_rounds() == PARAMS.rounds + INCREMENT_ROUNDS
    info, _ = latest_snapshot(storage, key.kind, key.arch)
    assert info.n_records == len(full) and info.trained_on["count"] == len(full)
    assert info.trained_on["max_id"] == int(full.record_id[-1])
    assert info.trained_on["continued_from"] == first
    assert base_model(storage, key, PARAMS).source == "snapshot"  # fresh again: reused
    # a snapshot that has grown MAX_TREES_RATIO x rounds trees is retrained from scratch
    big = fit_ranker(old.x, old.secs, old.group, PARAMS, rounds=MAX_TREES_RATIO * PARAMS.rounds)
    _snapshot(
        storage,
        to_bytes(big),
        target_kind=key.kind,
        target_arch=key.arch,
        n_records=len(old),
        trained_on=old.trained_on(),
    )
    retrained = base_model(storage, key, PARAMS)
    assert retrained.source == "trained"
    assert retrained.booster.num_boosted_rounds() == PARAMS.rounds


# ---------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_model_cli(cm_db, tmp_path) -> None:
    path = tmp_path / "cli.db"
    copy_sqlite(cm_db.path, path)
    url = f"sqlite:///{path}"
    res = runner.invoke(app, ["cost-model", "list", "--db", url])
    assert res.exit_code == 0 and "no cost-model snapshots" in res.output
    res = runner.invoke(app, ["cost-model", "train", "--db", url])
    assert res.exit_code == 0, res.output
    assert "snapshot #1: trained on" in res.output
    res = runner.invoke(app, ["cost-model", "list", "--db", url, "--target", "llvm"])
    assert res.exit_code == 0 and "llvm/" in res.output
    old_name = runner.invoke(app, ["model", "list", "--db", url, "--target", "llvm"])
    assert old_name.exit_code == 0 and old_name.output == res.output  # hidden alias
    top = runner.invoke(app, ["--help"]).output
    assert "│ cost-model " in top and "│ model " not in top
    res = runner.invoke(app, ["cost-model", "eval", "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"tunefarm", "stock_xgb", "random"}
    assert all(isinstance(v["pairwise_accuracy"], float) for v in out.values())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cost-model", "eval"], "no valid tuning records for target llvm/"),
        (["cost-model", "train", "--target", "cuda", "--arch", "sm_90"], "target cuda/sm_90"),
        (["cost-model", "eval", "--test-frac", "2"], "--test-frac must be between 0 and 1"),
        (
            ["tune", str(TINY), "--cost-model", "gbdt"],
            "unknown cost model 'gbdt'; valid: tunefarm, xgb, random",
        ),
    ],
)
def test_model_cli_errors(args, needle, sqlite_url) -> None:
    Storage(sqlite_url)  # an empty TuneFarm database
    res = runner.invoke(app, [*args, "--db", sqlite_url])
    assert res.exit_code == 1, res.output
    lines = [line for line in res.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output


# ---------------------------------------------------------------------- warm vs cold job
def _first_batch_ids(url: str, job_id: int) -> list[int]:
    """Record ids of the job's first 16 searched candidates (not the default schedule)."""
    query = select(RecordRow.id, RecordRow.trace_json).where(RecordRow.job_id == job_id)
    rows = Storage(url, create=False).run(lambda s: list(s.execute(query.order_by(RecordRow.id))))
    return [rid for rid, trace in rows if json.loads(trace)[0]][:16]


@pytest.mark.slow
@pytest.mark.ray
def test_warm_job_proposes_better_first_batch(cm_db, llvm_target, tmp_path) -> None:
    """A job on a bucket the team's model was trained on proposes, in its first batch, the
    candidates that model ranks above those a cold job proposes (same seed, same budget, fresh
    databases). Asserted on the model's scores of the proposals, which do not depend on how
    busy the machine is; their measured times are the cost-model benchmark's
    (benchmarks/cost_model.py, cold and warm side by side in one run)."""
    key = TargetKey.of(llvm_target)
    trained = base_model(Storage(cm_db.url), key, PARAMS)
    assert trained.booster is not None
    # the team's model knows the bucket: on its records at n=32, its top 16 ran faster than
    # the bucket's median record (the measured times are the fixture's, fixed for this run)
    team = load_dataset(Storage(cm_db.url, create=False), key)
    n32 = team.subset(
        np.array([team.workloads[g].bucket == {"n": 32} for g in team.group.tolist()]) & team.valid
    )
    top = np.argsort(-score_rows(trained.booster, n32.x))[:16]
    assert np.median(n32.secs[top]) < np.median(n32.secs)
    model = load_model(CM_MATMUL)
    scores = {}
    for name, cost_model in (("cold", "xgb"), ("warm", "tunefarm")):
        url = f"sqlite:///{tmp_path / name}.db"
        storage = Storage(url)
        if name == "warm":  # a teammate's snapshot: no record of this database helps the search
            save_snapshot(
                storage,
                target_kind=key.kind,
                target_arch=key.arch,
                model_blob=to_bytes(trained.booster),
                format_version=FORMAT_VERSION,
                xgboost_version=xgb.__version__,
                feature_version=FEATURE_VERSION,
                n_records=48,
                trained_on={"max_id": 0, "count": 48},
            )
        config = TuneConfig(
            trials=17,
            trials_per_iter=16,
            seed=3,
            measure=MeasureConfig(min_repeat_ms=5, repeat=2, screen=0.0),
            cost_model=cost_model,
        )
        summary = tune(model.mod, llvm_target, storage, config, buckets={"n": [32]})
        ids = _first_batch_ids(url, summary.job_id)
        assert len(ids) == 16
        batch = load_dataset(storage, key)
        rows = np.isin(batch.record_id, ids)
        scores[name] = score_rows(trained.booster, batch.x[rows])
    assert np.median(scores["warm"]) > np.median(scores["cold"]), scores
