"""Probe-reported integers are 64-bit: GPU clocks, P-state, process count, host CPU/GPU counts.

The probe accepts any integer up to 2**63 - 1 (what SQLite's INTEGER holds); on PostgreSQL these
columns were 4 bytes, so one absurd reading failed its whole sample batch. SQLite stores every
INTEGER in up to 8 bytes already, so only other databases are altered (no SQLite table rebuild).
PostgreSQL cannot alter a column a view reads: 0002's views are dropped and created again.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WIDENED = {
    "gpu_samples": ("performance_state", "clock_sm_mhz", "clock_mem_mhz", "process_count"),
    "hosts": ("cpu_count", "gpu_count"),
}


def _alter(new: type[sa.Integer], old: type[sa.Integer]) -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    views: dict[str, str] = importlib.import_module("db.migrations.versions.0002_views").VIEWS
    for name in reversed(views):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for table, columns in WIDENED.items():
        for column in columns:
            op.alter_column(table, column, type_=new(), existing_type=old(),
                            existing_nullable=True)
    for name, select_sql in views.items():
        op.execute(f"CREATE VIEW {name} AS {select_sql.strip()}")


def upgrade() -> None:
    """ALTER the columns to BIGINT (PostgreSQL and other non-SQLite databases)."""
    _alter(sa.BigInteger, sa.Integer)


def downgrade() -> None:
    """Back to 4-byte INTEGER (fails on rows holding larger values)."""
    _alter(sa.Integer, sa.BigInteger)
