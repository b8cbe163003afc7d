"""The paired re-timing's verdicts: which of the schedules it compared the build picks.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "workload_id",
            sa.Integer(),
            sa.ForeignKey("workloads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("target_key", sa.String(40), nullable=False),
        sa.Column("winner", sa.String(32), nullable=False),
        sa.Column("compared_json", sa.Text(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_verdict_workload", "verdicts", ["workload_id", "target_key", "id"])
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="9"))


def downgrade() -> None:
    op.drop_index("ix_verdict_workload", table_name="verdicts")
    op.drop_table("verdicts")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="8"))
