"""tasks.group_id, group_kind, group_index: the members of a multi-node gang or a job array.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the three nullable group columns (existing tasks are lone tasks) and their index."""
    op.add_column("tasks", sa.Column("group_id", sa.Integer(), nullable=True))
    op.add_column("tasks", sa.Column("group_kind", sa.String(length=8), nullable=True))
    op.add_column("tasks", sa.Column("group_index", sa.Integer(), nullable=True))
    op.create_index("ix_tasks_group_id", "tasks", ["group_id"])


def downgrade() -> None:
    """Drop the group columns and their index."""
    op.drop_index("ix_tasks_group_id", table_name="tasks")
    op.drop_column("tasks", "group_index")
    op.drop_column("tasks", "group_kind")
    op.drop_column("tasks", "group_id")
