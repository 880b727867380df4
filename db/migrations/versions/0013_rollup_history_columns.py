"""gpu_samples_1m gets what bucketed history needs to be answered from it exactly (issue #17).

mem_used_avg, and per reading the number of samples that had it (util_samples,
mem_used_samples, temp_samples, power_samples): a bucket's mean is the mean of its minutes'
means weighted by those counts, which equals the mean over the raw samples even when some
readings are NULL. NULL in these columns: a minute rolled up before this revision whose raw
samples are gone. Minutes whose raw samples are all still there are filled in here (about 1 s
per 80,000 such minutes on the test machine; a week of 512 GPUs is ~5 M minutes). An index on
bucket_ts makes the rollup watermark (the newest bucket) one index lookup.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("mem_used_avg", sa.Float()),
    ("util_samples", sa.Integer()),
    ("mem_used_samples", sa.Integer()),
    ("temp_samples", sa.Integer()),
    ("power_samples", sa.Integer()),
)
# The raw samples of one rollup row's minute (correlated on the row being updated); minutes
# before the oldest raw sample are not even looked at (a year of rollups, a week of raw).
MINUTE = ("FROM gpu_samples s WHERE s.gpu_id = gpu_samples_1m.gpu_id "
          "AND s.ts >= gpu_samples_1m.bucket_ts AND s.ts < gpu_samples_1m.bucket_ts + 60000")
BACKFILL = f"""
UPDATE gpu_samples_1m SET (mem_used_avg, util_samples, mem_used_samples, temp_samples,
    power_samples) = (
    SELECT CAST(avg(s.memory_used_bytes) AS DOUBLE PRECISION), count(s.utilization_gpu_pct),
        count(s.memory_used_bytes), count(s.temperature_c), count(s.power_draw_w) {MINUTE})
WHERE bucket_ts >= (SELECT min(ts) FROM gpu_samples) / 60000 * 60000
    AND samples = (SELECT count(*) {MINUTE})
"""


def upgrade() -> None:
    """ADD COLUMN (no table rebuild, views untouched), the index, then the backfill."""
    for name, column_type in COLUMNS:
        op.add_column("gpu_samples_1m", sa.Column(name, column_type, nullable=True))
    op.create_index("ix_gpu_samples_1m_bucket_ts", "gpu_samples_1m", ["bucket_ts"])
    op.execute(BACKFILL)


def downgrade() -> None:
    """Drop the index and the columns (SQLite >= 3.35 drops a column in place)."""
    op.drop_index("ix_gpu_samples_1m_bucket_ts", table_name="gpu_samples_1m")
    for name, _ in reversed(COLUMNS):
        op.drop_column("gpu_samples_1m", name)
