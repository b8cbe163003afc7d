"""How each of a finished job's tasks ended (weight, trials, best, convergence).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_tasks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("workload_id", sa.Integer(), sa.ForeignKey("workloads.id", ondelete="SET NULL")),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("best_sec", sa.Float()),
        sa.Column("baseline_sec", sa.Float()),
        sa.Column("expected_gain", sa.Float()),
        sa.Column("converged", sa.Boolean(), nullable=False),
        sa.Column("converged_at", sa.Integer()),
    )
    op.create_index("ix_job_tasks_job_id", "job_tasks", ["job_id"])
    op.create_index("ix_job_tasks_workload_id", "job_tasks", ["workload_id"])
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="8"))


def downgrade() -> None:
    op.drop_index("ix_job_tasks_workload_id", "job_tasks")
    op.drop_index("ix_job_tasks_job_id", "job_tasks")
    op.drop_table("job_tasks")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="7"))
