"""gpu_samples.gpu_id no longer has a foreign key to gpus.id, on every backend.

The per-row check of that key was ~40 % of PostgreSQL's time ingesting samples (issue #14).
fleet never deletes a GPU row, so the key guarded nothing fleet does; `fleet db check` reports
samples whose GPU is missing instead (db.references). It is dropped on SQLite too, so that
both backends hold the same schema and `fleet db copy` moves any history either way. SQLite
cannot drop a constraint in place: the table is rebuilt once (0002's views that read it are
dropped and created again around the rebuild).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FOREIGN_KEY = "fk_gpu_samples_gpu_id_gpus"
# 0002's views that read gpu_samples (an SQLite rebuild renames the table under them).
SAMPLE_VIEWS = ("gpu_latest", "gpu_history")


def _around_rebuild(change: str) -> None:
    """Apply `change` ("drop" or "create" the key) to gpu_samples, keeping 0002's views."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    views: dict[str, str] = importlib.import_module("db.migrations.versions.0002_views").VIEWS
    if sqlite:
        for name in SAMPLE_VIEWS:
            op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("gpu_samples") as batch:
        if change == "drop":
            batch.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        else:
            batch.create_foreign_key(FOREIGN_KEY, "gpus", ["gpu_id"], ["id"],
                                     ondelete="CASCADE")
    if sqlite:
        for name in SAMPLE_VIEWS:
            op.execute(f"CREATE VIEW {name} AS {views[name].strip()}")


def upgrade() -> None:
    """Drop the key (PostgreSQL: ALTER TABLE, no rewrite; SQLite: one table rebuild)."""
    _around_rebuild("drop")


def downgrade() -> None:
    """Create the key again (fails while any sample names a missing GPU: delete those first)."""
    _around_rebuild("create")
