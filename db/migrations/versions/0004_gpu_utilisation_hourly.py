"""View gpu_utilisation_hourly: per GPU and hour, from the 1-minute rollups (portable SQL).

Averages are weighted by each minute's sample count; hours are `hour_ms` / `hour_s` epoch times.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _weighted(column: str) -> str:
    return (f"SUM(r.{column} * r.samples) / "
            f"NULLIF(SUM(CASE WHEN r.{column} IS NOT NULL THEN r.samples END), 0)")


VIEW_SQL = f"""
CREATE VIEW gpu_utilisation_hourly AS
SELECT h.name AS host, g.idx AS gpu_index, g.uuid, g.name AS gpu_name, r.gpu_id,
    (r.bucket_ts / 3600000) * 3600000 AS hour_ms, (r.bucket_ts / 3600000) * 3600 AS hour_s,
    SUM(r.samples) AS samples,
    {_weighted("util_avg")} AS util_avg, MAX(r.util_max) AS util_max,
    MAX(r.mem_used_max) AS mem_used_max,
    {_weighted("temp_avg")} AS temp_avg, MAX(r.temp_max) AS temp_max,
    {_weighted("power_avg")} AS power_avg, MAX(r.power_max) AS power_max
FROM gpu_samples_1m r
JOIN gpus g ON g.id = r.gpu_id
JOIN hosts h ON h.id = g.host_id
GROUP BY r.gpu_id, r.bucket_ts / 3600000, h.name, g.idx, g.uuid, g.name
"""


def upgrade() -> None:
    """Create the hourly utilisation view."""
    op.execute(VIEW_SQL)


def downgrade() -> None:
    """Drop the hourly utilisation view."""
    op.execute("DROP VIEW IF EXISTS gpu_utilisation_hourly")
