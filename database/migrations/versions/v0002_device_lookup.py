"""Exact-device lookups: a device key on every record, and indexes for each lookup level.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.add_column(sa.Column("device_key", sa.String(40)))
    records = sa.table(
        "tuning_records", sa.column("id"), sa.column("device"), sa.column("device_key")
    )
    conn = op.get_bind()
    devices = conn.execute(
        sa.select(records.c.device).where(records.c.device.is_not(None)).distinct()
    ).scalars()
    for device in list(devices):
        conn.execute(
            records.update()
            .where(records.c.device == device)
            .values(device_key=hashlib.sha1(device.encode()).hexdigest())
        )
    op.create_index("ix_record_device", "tuning_records", ["workload_id", "device_key", "mean_sec"])
    op.create_index(
        "ix_record_arch",
        "tuning_records",
        ["workload_id", "target_kind", "target_arch", "mean_sec"],
    )
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    conn.execute(meta.update().where(meta.c.key == "schema_version").values(value="2"))


def downgrade() -> None:
    op.drop_index("ix_record_arch", "tuning_records")
    op.drop_index("ix_record_device", "tuning_records")
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_column("device_key")
    meta = sa.table("tunefarm_meta", sa.column("key"), sa.column("value"))
    op.get_bind().execute(meta.update().where(meta.c.key == "schema_version").values(value="1"))
