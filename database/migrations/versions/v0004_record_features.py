"""Cached cost-model features of tuning records (float32 bytes), computed once per record.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "record_features",
        sa.Column(
            "record_id",
            sa.Integer(),
            sa.ForeignKey("tuning_records.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("feature_version", sa.Integer(), nullable=False),
        sa.Column("pooled", sa.LargeBinary(), nullable=False),
        sa.Column("per_store", sa.LargeBinary(), nullable=False),
        sa.Column("per_store_rows", sa.Integer(), nullable=False),
        sa.Column("per_store_cols", sa.Integer(), nullable=False),
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="4"))


def downgrade() -> None:
    op.drop_table("record_features")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="3"))
