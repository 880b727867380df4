"""Initial schema: hosts, GPUs, samples and rollups, tasks, allocations, events, candidates.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("service_type", sa.String(length=64), nullable=False),
        sa.Column("server", sa.String(length=255), nullable=True),
        sa.Column("txt_json", sa.Text(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("gpu_model", sa.String(length=255), nullable=True),
        sa.Column("session", sa.String(length=255), nullable=True),
        sa.Column("first_seen", sa.BigInteger(), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.CheckConstraint(
            "state IN ('seen', 'gone', 'adopted')", name=op.f("ck_candidates_state")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
        sa.UniqueConstraint(
            "address", "port", "service_type", name=op.f("uq_candidates_address_port_service_type")
        ),
    )
    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=True),
        sa.Column("connection", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("groups_json", sa.Text(), nullable=False),
        sa.Column("labels_json", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("drained", sa.Boolean(), nullable=False),
        sa.Column("drain_reason", sa.Text(), nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("kernel", sa.String(length=255), nullable=True),
        sa.Column("driver_version", sa.String(length=64), nullable=True),
        sa.Column("cuda_driver_version", sa.String(length=64), nullable=True),
        sa.Column("cpu_count", sa.Integer(), nullable=True),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("first_seen", sa.BigInteger(), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.Column("last_probe_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("connection IN ('ssh', 'local')", name=op.f("ck_hosts_connection")),
        sa.CheckConstraint(
            "source IN ('inventory', 'ssh_config', 'discovery', 'adopted')",
            name=op.f("ck_hosts_source"),
        ),
        sa.CheckConstraint(
            "state IN ('unknown', 'up', 'unreachable', 'auth_failed', 'host_key_rejected', "
            "'probe_error', 'down')",
            name=op.f("ck_hosts_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hosts")),
        sa.UniqueConstraint("address", "port", name=op.f("uq_hosts_address_port")),
        sa.UniqueConstraint("name", name=op.f("uq_hosts_name")),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("pci_bus_id", sa.String(length=64), nullable=True),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("drained", sa.Boolean(), nullable=False),
        sa.Column("drain_reason", sa.Text(), nullable=True),
        sa.Column("first_seen", sa.BigInteger(), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "state IN ('ok', 'hot', 'failed', 'degraded', 'lost')", name=op.f("ck_gpus_state")
        ),
        sa.ForeignKeyConstraint(
            ["host_id"], ["hosts.id"], name=op.f("fk_gpus_host_id_hosts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("host_id", "idx", name=op.f("uq_gpus_host_id_idx")),
    )
    op.create_index("ix_gpus_uuid", "gpus", ["uuid"], unique=False)

    op.create_table(
        "host_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("load_1m", sa.Float(), nullable=True),
        sa.Column("load_5m", sa.Float(), nullable=True),
        sa.Column("load_15m", sa.Float(), nullable=True),
        sa.Column("cpu_busy_pct", sa.Float(), nullable=True),
        sa.Column("memory_available_bytes", sa.BigInteger(), nullable=True),
        sa.Column("disk_root_free_bytes", sa.BigInteger(), nullable=True),
        sa.Column("disk_tasks_free_bytes", sa.BigInteger(), nullable=True),
        sa.Column("net_rx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("net_tx_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["host_id"],
            ["hosts.id"],
            name=op.f("fk_host_samples_host_id_hosts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_samples")),
    )
    op.create_index("ix_host_samples_host_id_ts", "host_samples", ["host_id", "ts"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("args_json", sa.Text(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("gpus_requested", sa.Integer(), nullable=False),
        sa.Column("constraints_json", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("remote_dir", sa.Text(), nullable=True),
        sa.Column("remote_pid", sa.Integer(), nullable=True),
        sa.Column("submitted_at", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'placing', 'starting', 'running', 'succeeded', 'failed', "
            "'cancelled', 'lost')",
            name=op.f("ck_tasks_state"),
        ),
        sa.ForeignKeyConstraint(
            ["host_id"], ["hosts.id"], name=op.f("fk_tasks_host_id_hosts"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    op.create_index("ix_tasks_state", "tasks", ["state"], unique=False)
    op.create_index("ix_tasks_submitted_at", "tasks", ["submitted_at"], unique=False)

    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("released_at", sa.BigInteger(), nullable=True),
        sa.Column("release_reason", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('task', 'reservation')", name=op.f("ck_allocations_kind")),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_allocations_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_allocations_task_id_tasks"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    op.create_index("ix_allocations_task_id", "allocations", ["task_id"], unique=False)
    op.create_index(
        "uq_allocations_active_gpu",
        "allocations",
        ["gpu_id"],
        unique=True,
        sqlite_where=sa.text("released_at IS NULL"),
        postgresql_where=sa.text("released_at IS NULL"),
    )

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("gpu_id", sa.Integer(), nullable=True),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "severity IN ('info', 'warning', 'error', 'critical')", name=op.f("ck_events_severity")
        ),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_events_gpu_id_gpus"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["host_id"], ["hosts.id"], name=op.f("fk_events_host_id_hosts"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"], name=op.f("fk_events_task_id_tasks"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index("ix_events_ts", "events", ["ts"], unique=False)

    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("utilization_gpu_pct", sa.Float(), nullable=True),
        sa.Column("utilization_memory_pct", sa.Float(), nullable=True),
        sa.Column("memory_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("power_draw_w", sa.Float(), nullable=True),
        sa.Column("fan_speed_pct", sa.Float(), nullable=True),
        sa.Column("performance_state", sa.Integer(), nullable=True),
        sa.Column("clock_sm_mhz", sa.Integer(), nullable=True),
        sa.Column("clock_mem_mhz", sa.Integer(), nullable=True),
        sa.Column("ecc_errors_uncorrected", sa.BigInteger(), nullable=True),
        sa.Column("process_count", sa.Integer(), nullable=True),
        sa.Column("lost", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_samples")),
    )
    op.create_index("ix_gpu_samples_gpu_id_ts", "gpu_samples", ["gpu_id", "ts"], unique=False)
    op.create_index("ix_gpu_samples_ts", "gpu_samples", ["ts"], unique=False)

    op.create_table(
        "gpu_samples_1m",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("bucket_ts", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("util_avg", sa.Float(), nullable=True),
        sa.Column("util_max", sa.Float(), nullable=True),
        sa.Column("mem_used_max", sa.BigInteger(), nullable=True),
        sa.Column("temp_avg", sa.Float(), nullable=True),
        sa.Column("temp_max", sa.Float(), nullable=True),
        sa.Column("power_avg", sa.Float(), nullable=True),
        sa.Column("power_max", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_1m_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("gpu_id", "bucket_ts", name=op.f("pk_gpu_samples_1m")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("gpu_samples_1m")
    op.drop_index("ix_gpu_samples_ts", table_name="gpu_samples")
    op.drop_index("ix_gpu_samples_gpu_id_ts", table_name="gpu_samples")

    op.drop_table("gpu_samples")
    op.drop_index("ix_events_ts", table_name="events")

    op.drop_table("events")
    op.drop_index(
        "uq_allocations_active_gpu",
        table_name="allocations",
        sqlite_where=sa.text("released_at IS NULL"),
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_index("ix_allocations_task_id", table_name="allocations")

    op.drop_table("allocations")
    op.drop_index("ix_tasks_submitted_at", table_name="tasks")
    op.drop_index("ix_tasks_state", table_name="tasks")

    op.drop_table("tasks")
    op.drop_index("ix_host_samples_host_id_ts", table_name="host_samples")

    op.drop_table("host_samples")
    op.drop_index("ix_gpus_uuid", table_name="gpus")

    op.drop_table("gpus")
    op.drop_table("hosts")
    op.drop_table("candidates")
