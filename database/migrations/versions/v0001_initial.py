"""The first schema (TuneFarm 0.1): workloads, jobs, tuning records, meta.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tunefarm_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("shash", sa.String(32), nullable=False),
        sa.Column("mod_json", sa.Text(), nullable=False),
        sa.Column("task_name", sa.String(256)),
        sa.Column("family_shash", sa.String(32)),
        sa.Column("bucket_json", sa.Text()),
        sa.Column("flops", sa.Float()),
        sa.Column("tvm_version", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_workloads_family_shash", "workloads", ["family_shash"])
    op.create_index("ix_workloads_shash", "workloads", ["shash"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("model", sa.Text()),
        sa.Column("target_json", sa.Text(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("submitted_by", sa.String(128)),
        sa.Column("config_json", sa.Text()),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("error", sa.Text()),
    )
    op.create_index("ix_jobs_name", "jobs", ["name"])
    op.create_table(
        "tuning_records",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "workload_id",
            sa.Integer(),
            sa.ForeignKey("workloads.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("candidate_hash", sa.String(32), nullable=False),
        sa.Column("trace_json", sa.Text(), nullable=False),
        sa.Column("args_info_json", sa.Text(), nullable=False),
        sa.Column("run_secs_json", sa.Text()),
        sa.Column("mean_sec", sa.Float()),
        sa.Column("std_sec", sa.Float()),
        sa.Column("target_key", sa.String(40), nullable=False),
        sa.Column("target_json", sa.Text(), nullable=False),
        sa.Column("target_kind", sa.String(32), nullable=False),
        sa.Column("target_arch", sa.String(64)),
        sa.Column("device", sa.Text()),
        sa.Column("worker", sa.String(256)),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL")),
        sa.Column("error_kind", sa.String(32)),
        sa.Column("error_msg", sa.Text()),
        sa.Column("build_sec", sa.Float()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "workload_id", "target_key", "candidate_hash", name="uq_record_candidate"
        ),
    )
    op.create_index("ix_tuning_records_target_kind", "tuning_records", ["target_kind"])
    op.create_index("ix_record_candidate", "tuning_records", ["candidate_hash", "target_key"])
    op.create_index("ix_record_best", "tuning_records", ["workload_id", "target_key", "mean_sec"])
    op.bulk_insert(
        sa.table("tunefarm_meta", sa.column("key"), sa.column("value")),
        [{"key": "schema_version", "value": "1"}],
    )


def downgrade() -> None:
    for table in ("tuning_records", "jobs", "workloads", "tunefarm_meta"):
        op.drop_table(table)
