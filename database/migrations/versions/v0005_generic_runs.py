"""Measured times of symbolic kernels' generic code at each bucket (the build's dispatch rule).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generic_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("family_shash", sa.String(32), nullable=False),
        sa.Column("bucket_json", sa.Text(), nullable=False),
        sa.Column("target_key", sa.String(40), nullable=False),
        sa.Column("target_kind", sa.String(32), nullable=False),
        sa.Column("target_arch", sa.String(64)),
        sa.Column("device", sa.Text()),
        sa.Column("device_key", sa.String(40)),
        sa.Column("run_secs_json", sa.Text(), nullable=False),
        sa.Column("mean_sec", sa.Float(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "family_shash", "bucket_json", "target_key", "device_key", name="uq_generic_run"
        ),
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="5"))


def downgrade() -> None:
    op.drop_table("generic_runs")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="4"))
