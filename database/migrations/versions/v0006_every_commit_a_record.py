"""Every commit is a record: the unique key per candidate goes, each record gets the median of
its run times (the best schedule's index) and stock MetaSchedule's sort key (``get_top_k``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import json
import statistics

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

CHUNK = 5000
LEVEL_INDEXES = {
    "ix_record_best": ["workload_id", "target_key"],
    "ix_record_device": ["workload_id", "device_key"],
    "ix_record_arch": ["workload_id", "target_kind", "target_arch"],
}


def upgrade() -> None:
    for name in LEVEL_INDEXES:
        op.drop_index(name, "tuning_records")
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_constraint("uq_record_candidate", type_="unique")
        batch.add_column(sa.Column("median_sec", sa.Float()))
        batch.add_column(sa.Column("rank_sec", sa.Float()))
    records = sa.table(
        "tuning_records",
        sa.column("id"),
        sa.column("run_secs_json"),
        sa.column("mean_sec"),
        sa.column("trace_json"),
        sa.column("median_sec"),
        sa.column("rank_sec"),
    )
    conn = op.get_bind()
    last = 0
    while True:  # valid records only: a failed one kept no run times before this revision
        rows = conn.execute(
            sa.select(records.c.id, records.c.run_secs_json)
            .where(records.c.id > last, records.c.mean_sec.is_not(None))
            .order_by(records.c.id)
            .limit(CHUNK)
        ).all()
        if not rows:
            break
        for rid, secs_json in rows:
            secs = json.loads(secs_json)
            conn.execute(
                records.update()
                .where(records.c.id == rid)
                .values(median_sec=statistics.median(secs), rank_sec=statistics.fmean(secs))
            )
        last = rows[-1][0]
    # stock deems a record with no schedule instructions (the untuned default) invalid
    conn.execute(records.update().where(records.c.trace_json == "[[], []]").values(rank_sec=None))
    for name, cols in LEVEL_INDEXES.items():
        op.create_index(name, "tuning_records", [*cols, "median_sec"])
    op.create_index("ix_record_top_k", "tuning_records", ["workload_id", "target_key", "rank_sec"])
    op.create_index(
        "ix_record_schedule", "tuning_records", ["workload_id", "target_key", "candidate_hash"]
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    conn.execute(meta.update().where(meta.c.key == "schema_version").values(value="6"))


def downgrade() -> None:
    """Back to one record per candidate: the first record of each is kept."""
    conn = op.get_bind()
    records = sa.table(
        "tuning_records",
        sa.column("id"),
        sa.column("workload_id"),
        sa.column("target_key"),
        sa.column("candidate_hash"),
    )
    first = (
        sa.select(sa.func.min(records.c.id))
        .group_by(records.c.workload_id, records.c.target_key, records.c.candidate_hash)
        .scalar_subquery()
    )
    conn.execute(records.delete().where(records.c.id.not_in(first)))
    for name in (*LEVEL_INDEXES, "ix_record_top_k", "ix_record_schedule"):
        op.drop_index(name, "tuning_records")
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_column("rank_sec")
        batch.drop_column("median_sec")
        batch.create_unique_constraint(
            "uq_record_candidate", ["workload_id", "target_key", "candidate_hash"]
        )
    for name, cols in LEVEL_INDEXES.items():
        op.create_index(name, "tuning_records", [*cols, "mean_sec"])
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    conn.execute(meta.update().where(meta.c.key == "schema_version").values(value="5"))
