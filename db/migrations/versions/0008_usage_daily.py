"""View usage_daily: GPU time held and busy per UTC day, owner and kind (task, reservation).

An allocation counts on the day it began (`day_s`, the day's start in epoch seconds); one still
active counts until now. Busy GPU-seconds weigh each rolled-up minute of the allocation's GPU by
its average utilisation (the last minutes, not rolled up yet, are not in it: `fleet usage` adds
them from the raw samples).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOW_S = {"sqlite": "CAST(strftime('%s', 'now') AS INTEGER)",
         "postgresql": "CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)"}


def view_sql(dialect: str) -> str:
    """The view's definition on `dialect` (only "now" differs)."""
    ended = f"COALESCE(a.released_at, {NOW_S.get(dialect, NOW_S['postgresql'])})"
    return f"""
CREATE VIEW usage_daily AS
SELECT (a.created_at / 86400) * 86400 AS day_s, a.owner, a.kind,
    COUNT(*) AS allocations,
    SUM(CASE WHEN a.released_at IS NULL THEN 1 ELSE 0 END) AS active,
    SUM({ended} - a.created_at) AS gpu_seconds,
    SUM((SELECT COALESCE(SUM(r.util_avg), 0) * 0.6 FROM gpu_samples_1m r
         WHERE r.gpu_id = a.gpu_id AND r.bucket_ts >= a.created_at * 1000
           AND r.bucket_ts < {ended} * 1000)) AS busy_gpu_seconds
FROM allocations a
GROUP BY (a.created_at / 86400) * 86400, a.owner, a.kind
"""


def upgrade() -> None:
    """Create the daily usage view."""
    op.execute(view_sql(op.get_bind().dialect.name))


def downgrade() -> None:
    """Drop the daily usage view."""
    op.execute("DROP VIEW IF EXISTS usage_daily")
