"""``tunefarm cost-model``: train, evaluate and list the cost model's database snapshots."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer
from rich.table import Table

from tuner.cli.common import ArchOpt, DbOpt, console, open_storage, user_errors
from tuner.errors import TuneFarmError

cost_model_app = typer.Typer(
    help="The cost model: pre-train it from the database, evaluate it, list its snapshots.",
    no_args_is_help=True,
)

ModelTargetOpt = Annotated[
    str,
    typer.Option("--target", "-t", help="Preset (llvm, cuda, arm64) or a TVM target dict as JSON."),
]


def _target_key(target: str, arch: str | None) -> Any:
    from database import TargetKey
    from tuner.targets import resolve_target

    return TargetKey.of(resolve_target(target, arch))


def _dataset(db: str | None, target: str, arch: str | None) -> tuple[Any, Any, Any]:
    from database.training import record_stats
    from tuner.cost_model.dataset import load_dataset
    from tuner.cost_model.warm import MAX_RECORDS
    from tuner.fastimport import preload_tensor_intrin

    key = _target_key(target, arch)
    storage = open_storage(db, create=False)
    count, _ = record_stats(storage, key.kind, key.arch)
    label = f"{key.kind}/{key.arch or '-'}"
    if count == 0:
        raise TuneFarmError(f"no valid tuning records for target {label} in the database")
    preload_tensor_intrin()
    return storage, key, load_dataset(storage, key, max_records=MAX_RECORDS)


def _params() -> Any:
    from tuner.cost_model.ranker import RankerParams

    return RankerParams(nthread=os.cpu_count() or 1)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


@cost_model_app.command()
@user_errors
def train(db: DbOpt = None, target: ModelTargetOpt = "llvm", arch: ArchOpt = None) -> None:
    """Train the cost model on every record of the target and store it as a snapshot."""
    from tuner.cost_model.warm import MIN_TRAIN_VALID, train_base

    storage, key, ds = _dataset(db, target, arch)
    base = train_base(storage, key, _params(), dataset=ds)
    if base.booster is None:
        raise TuneFarmError(f"cannot train: {base.note} (need {MIN_TRAIN_VALID} valid)")
    console.print(f"snapshot #{base.snapshot_id}: {base.note}")


@cost_model_app.command("eval")
@user_errors
def evaluate(
    db: DbOpt = None,
    target: ModelTargetOpt = "llvm",
    arch: ArchOpt = None,
    test_frac: Annotated[
        float, typer.Option(help="Share of the newest records held out (chronological split).")
    ] = 0.2,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Ranking quality on held-out records: ours vs stock XGBModel vs random."""
    from tuner.cost_model.evaluate import compare

    if not 0 < test_frac < 1:
        raise TuneFarmError(f"--test-frac must be between 0 and 1 (got {test_frac})")
    _storage, key, ds = _dataset(db, target, arch)
    result = compare(ds, _params(), test_frac=test_frac)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for split in ("chronological", "leave_one_workload_out"):
        first = result["tunefarm"][split]
        table = Table(
            title=f"{split.replace('_', ' ')}: {first['rows']} held-out valid records, "
            f"{first['workloads']} workloads ({key.kind}/{key.arch or '-'})"
        )
        cols = ["model", "pairwise acc", "recall@1", "recall@5", "peak@1", "peak@5", "peak@10"]
        for col in cols:
            table.add_column(col, justify="left" if col == "model" else "right")
        for name, res in result.items():
            m = res[split]
            table.add_row(
                name,
                *(_fmt(m.get(k)) for k in ("pairwise_accuracy", "recall@1", "recall@5")),
                *(_fmt(m.get(k)) for k in ("peak@1", "peak@5", "peak@10")),
            )
        console.print(table)


@cost_model_app.command("list")
@user_errors
def list_(
    db: DbOpt = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Only this target (preset or JSON).")
    ] = None,
    arch: ArchOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """The cost-model snapshots in the database, newest first."""
    import dataclasses

    from database.snapshots import list_snapshots

    storage = open_storage(db, create=False)
    key = _target_key(target, arch) if target else None
    rows = list_snapshots(storage, key.kind if key else None, key.arch if key else None)
    if as_json:
        data = [dataclasses.asdict(r) for r in rows]
        print(json.dumps(data, indent=2, default=lambda v: v.isoformat()))
        return
    if not rows:
        console.print("no cost-model snapshots")
        return
    table = Table(title="cost-model snapshots")
    for col in ("id", "created", "target", "records", "train pairwise", "versions", "by", "size"):
        table.add_column(col)
    for r in rows:
        train = r.metrics.get("train", {}) if isinstance(r.metrics.get("train"), dict) else {}
        table.add_row(
            str(r.id),
            r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else "-",
            f"{r.target_kind}/{r.target_arch or '-'}",
            str(r.n_records),
            _fmt(train.get("pairwise_accuracy")),
            f"tvm {r.tvm_version}, xgb {r.xgboost_version}, feat v{r.feature_version}",
            r.created_by or "-",
            f"{r.size / 1024:.0f} KiB",
        )
    console.print(table)
