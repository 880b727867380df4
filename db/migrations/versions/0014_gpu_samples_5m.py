"""gpu_samples_5m: five-minute rollups of gpu_samples_1m, for long bucketed histories (#17).

A day of one GPU is 288 of these rows against 1,440 minutes, and as the minutes of all GPUs
are written together, 1,440 heap pages against ~290: what a 24 h history at 5-minute buckets
spends its time reading on PostgreSQL. The same columns as gpu_samples_1m; each period's
`*_samples` are the weights its minutes' means had (a minute from before 0013 weighs its
sample count), so longer buckets built from these periods equal those built from the minutes.
Filled here from the minutes of the whole periods of the last 7 days before the minute
rollups' watermark (on SQLite here about 1 s per 220,000 minutes: ~25 s for a week of 512 GPUs,
where a year would take ~20 minutes); older buckets keep being read from the minutes, and the
retention pass rolls every new period from then on.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READINGS = ("util", "mem_used", "temp", "power")
# gpu_samples_1m's value columns, in its order (0001's, then 0013's).
VALUES: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("util_avg", sa.Float()), ("util_max", sa.Float()), ("mem_used_max", sa.BigInteger()),
    ("temp_avg", sa.Float()), ("temp_max", sa.Float()), ("power_avg", sa.Float()),
    ("power_max", sa.Float()), ("mem_used_avg", sa.Float()),
    *((f"{reading}_samples", sa.Integer()) for reading in READINGS))


def _weight(reading: str) -> str:
    return (f"CASE WHEN {reading}_avg IS NULL THEN 0 "
            f"ELSE COALESCE({reading}_samples, samples) END")


def _period_columns() -> str:
    parts = ["gpu_id", "bucket_ts / 300000 * 300000", "SUM(samples)"]
    for reading in READINGS:
        weight = _weight(reading)
        parts += [f"CAST(SUM({reading}_avg * {weight}) AS DOUBLE PRECISION) / "
                  f"NULLIF(SUM({weight}), 0)", f"MAX({reading}_max)", f"SUM({weight})"]
    return ", ".join(parts)


# The minutes' watermark floored to a period: where the backfill ends (it starts a week before).
END_MS = "SELECT (MAX(bucket_ts) + 60000) / 300000 * 300000 FROM gpu_samples_1m"
BACKFILL = f"""
INSERT INTO gpu_samples_5m (gpu_id, bucket_ts, samples, {", ".join(
    f"{r}_avg, {r}_max, {r}_samples" for r in READINGS)})
SELECT {_period_columns()}
FROM gpu_samples_1m
WHERE bucket_ts >= ({END_MS}) - {7 * 86_400_000} AND bucket_ts < ({END_MS})
GROUP BY gpu_id, bucket_ts / 300000 * 300000
"""


def upgrade() -> None:
    """The table as gpu_samples_1m's, its bucket_ts index, then the last week's periods."""
    values: list[sa.Column[Any]] = [
        sa.Column(name, column_type, nullable=True) for name, column_type in VALUES]
    op.create_table(
        "gpu_samples_5m",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("bucket_ts", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        *values,
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_5m_gpu_id_gpus"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("gpu_id", "bucket_ts", name=op.f("pk_gpu_samples_5m")),
    )
    op.create_index("ix_gpu_samples_5m_bucket_ts", "gpu_samples_5m", ["bucket_ts"])
    op.execute(BACKFILL)  # plain SQL, so that `alembic upgrade --sql` writes it out too


def downgrade() -> None:
    """Drop the table (the minutes it was built from are untouched)."""
    op.drop_index("ix_gpu_samples_5m_bucket_ts", table_name="gpu_samples_5m")
    op.drop_table("gpu_samples_5m")
