"""tasks.timed_out: the task was stopped for running past its --timeout (a field, not a message).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add tasks.timed_out (not null, default false); past timeouts are read from their error."""
    op.add_column("tasks", sa.Column("timed_out", sa.Boolean(), nullable=False,
                                     server_default=sa.false()))
    op.execute("UPDATE tasks SET timed_out = true WHERE error LIKE 'timed out%'")


def downgrade() -> None:
    """Drop tasks.timed_out."""
    op.drop_column("tasks", "timed_out")
