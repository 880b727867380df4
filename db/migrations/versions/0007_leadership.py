"""The controller pair's leadership record: one row, its epoch bumped by every takeover.

A leader's writes check the epoch they were elected with (db.leadership.check_epoch), so a
leader that was frozen and wakes up after a standby took over writes nothing. The table has no
row until the first takeover, so a fresh database has nothing for `fleet db copy` to carry.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_leadership",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("since_s", sa.Float, nullable=False),
        sa.CheckConstraint("id = 1", name="ck_fleet_leadership_one_row"),
    )


def downgrade() -> None:
    op.drop_table("fleet_leadership")
