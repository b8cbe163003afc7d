"""Cost-model snapshots: trained XGBoost models shared by every job of a team.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cost_model_snapshots",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target_kind", sa.String(32), nullable=False),
        sa.Column("target_arch", sa.String(64)),
        sa.Column("format_version", sa.Integer(), nullable=False),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("xgboost_version", sa.String(64), nullable=False),
        sa.Column("feature_version", sa.Integer(), nullable=False),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("trained_on", sa.Text(), nullable=False),
        sa.Column("metrics_json", sa.Text()),
        sa.Column("model_blob", sa.LargeBinary(), nullable=False),
        sa.Column("created_by", sa.String(128)),
    )
    op.create_index(
        "ix_snapshot_target", "cost_model_snapshots", ["target_kind", "target_arch", "created_at"]
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="3"))


def downgrade() -> None:
    op.drop_index("ix_snapshot_target", "cost_model_snapshots")
    op.drop_table("cost_model_snapshots")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="2"))
