"""tasks.checked_at: when a running task's host last answered a status check (epoch seconds).

The reconciler marks a task `lost` only after its host has not answered for a bound measured
from this time (or from started_at when it was never checked).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add tasks.checked_at (nullable: ADD COLUMN, no table rebuild, views untouched)."""
    op.add_column("tasks", sa.Column("checked_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    """Drop tasks.checked_at (SQLite >= 3.35 drops a column in place; no view reads it)."""
    op.drop_column("tasks", "checked_at")
