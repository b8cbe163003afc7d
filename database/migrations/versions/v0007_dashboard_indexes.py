"""Indexes the dashboard reads through: a job's records by kernel, and records by device.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_record_job", "tuning_records", ["job_id", "workload_id", "mean_sec"])
    op.create_index(
        "ix_record_target_device", "tuning_records", ["target_key", "device_key", "workload_id"]
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="7"))


def downgrade() -> None:
    op.drop_index("ix_record_target_device", "tuning_records")
    op.drop_index("ix_record_job", "tuning_records")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="6"))
