"""Usage views that agree with `fleet usage`, and hourly means weighted per reading.

- allocation_spans (new): one row per allocation with `held_until`, when it stopped counting as
  held: the earliest of its release, its expiry (a reservation past its `--for` that nothing
  has released yet, or released late, is held only until then) and, for a task's allocation,
  the task's end (the release may come later, when the end is noticed: claim ordering wants
  that, usage does not); never before `created_at`; NULL while none of these is known. It may
  lie in the future (a reservation that has not expired yet): a reader caps it at now.
  `fleet usage` (db.usage.holdings), `usage_daily` and fair share read holdings from here,
  so that the three agree on what was held, and for how long, by construction.
- usage_daily (recreated): gpu_seconds from allocation_spans (an allocation counts until it
  was released, expired or its task ended, at most until now; `active`: still held now), and
  busy_gpu_seconds pro rata: each rolled-up minute counts for the part of it the allocation
  held (0008 counted every minute starting inside the holding whole, and none of the minute
  it began in), as `fleet usage` does (db.usage.busy_seconds).
- gpu_utilisation_hourly (recreated): each minute's mean weighs the samples that had the
  reading (`{reading}_samples`, 0013; a minute from before 0013: its sample count), as
  db.rollup_history.weighted_mean_sql and `fleet history gpus --bucket 1h` do; 0004 weighted
  it by all the minute's samples, wrong where some samples lacked the reading.

The same text on both backends but for "now". A later migration that rebuilds allocations,
tasks or gpu_samples_1m on SQLite must drop these views first and create them again after.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOW_S = {"sqlite": "CAST(strftime('%s', 'now') AS INTEGER)",
         "postgresql": "CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)"}


def _least(first: str, second: str) -> str:
    """The lesser of two values that are not NULL (SQLite's min(a, b), PostgreSQL's LEAST)."""
    return f"CASE WHEN {first} <= {second} THEN {first} ELSE {second} END"


def _greatest(first: str, second: str) -> str:
    """The greater of two values that are not NULL."""
    return f"CASE WHEN {first} >= {second} THEN {first} ELSE {second} END"


def _earliest(first: str, second: str) -> str:
    """The earlier of two times, either of them NULL (unknown); NULL only when both are."""
    return (f"CASE WHEN {first} IS NULL THEN {second} WHEN {second} IS NULL THEN {first} "
            f"ELSE {_least(first, second)} END")


ALLOCATION_SPANS = f"""
CREATE VIEW allocation_spans AS
SELECT e.allocation_id, e.gpu_id, e.task_id, e.kind, e.owner, e.note, e.created_at,
    e.expires_at, e.released_at, e.release_reason,
    CASE WHEN e.ended IS NULL THEN NULL ELSE {_greatest("e.ended", "e.created_at")} END
        AS held_until
FROM (SELECT a.id AS allocation_id, a.gpu_id, a.task_id, a.kind, a.owner, a.note, a.created_at,
        a.expires_at, a.released_at, a.release_reason,
        {_earliest(_earliest("a.released_at", "a.expires_at"), "t.ended_at")} AS ended
    FROM allocations a LEFT OUTER JOIN tasks t ON t.id = a.task_id) e
"""


def usage_daily(dialect: str) -> str:
    """usage_daily on `dialect` (only "now" differs)."""
    now = NOW_S.get(dialect, NOW_S["postgresql"])
    # Of each rolled-up minute of the allocation's GPU, the milliseconds it held.
    held_ms = (f"{_least('r.bucket_ts + 60000', 'h.until_s * 1000')} - "
               f"{_greatest('r.bucket_ts', 'h.created_at * 1000')}")
    return f"""
CREATE VIEW usage_daily AS
SELECT (h.created_at / 86400) * 86400 AS day_s, h.owner, h.kind,
    COUNT(*) AS allocations,
    SUM(h.active) AS active,
    SUM(h.until_s - h.created_at) AS gpu_seconds,
    SUM((SELECT COALESCE(SUM(r.util_avg * ({held_ms})), 0) / 100000.0 FROM gpu_samples_1m r
         WHERE r.gpu_id = h.gpu_id AND r.bucket_ts > h.created_at * 1000 - 60000
           AND r.bucket_ts < h.until_s * 1000)) AS busy_gpu_seconds
FROM (SELECT s.owner, s.kind, s.gpu_id, s.created_at,
        CASE WHEN s.held_until IS NULL OR s.held_until > {now}
            THEN {_greatest(now, "s.created_at")} ELSE s.held_until END AS until_s,
        CASE WHEN s.held_until IS NULL OR s.held_until > {now} THEN 1 ELSE 0 END AS active
    FROM allocation_spans s) h
GROUP BY (h.created_at / 86400) * 86400, h.owner, h.kind
"""


def _weighted(reading: str) -> str:
    """The mean of the minutes' means of `reading`, each weighted by the samples that had it."""
    weight = (f"CASE WHEN r.{reading}_avg IS NULL THEN NULL "
              f"ELSE COALESCE(r.{reading}_samples, r.samples) END")
    return (f"CAST(SUM(r.{reading}_avg * {weight}) AS FLOAT) / "
            f"CAST(NULLIF(SUM({weight}), 0) AS FLOAT)")


GPU_UTILISATION_HOURLY = f"""
CREATE VIEW gpu_utilisation_hourly AS
SELECT h.name AS host, g.idx AS gpu_index, g.uuid, g.name AS gpu_name, r.gpu_id,
    (r.bucket_ts / 3600000) * 3600000 AS hour_ms, (r.bucket_ts / 3600000) * 3600 AS hour_s,
    SUM(r.samples) AS samples,
    {_weighted("util")} AS util_avg, MAX(r.util_max) AS util_max,
    MAX(r.mem_used_max) AS mem_used_max,
    {_weighted("temp")} AS temp_avg, MAX(r.temp_max) AS temp_max,
    {_weighted("power")} AS power_avg, MAX(r.power_max) AS power_max
FROM gpu_samples_1m r
JOIN gpus g ON g.id = r.gpu_id
JOIN hosts h ON h.id = g.host_id
GROUP BY r.gpu_id, r.bucket_ts / 3600000, h.name, g.idx, g.uuid, g.name
"""


def upgrade() -> None:
    """Replace usage_daily and gpu_utilisation_hourly, with allocation_spans under the first."""
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS usage_daily")
    op.execute("DROP VIEW IF EXISTS gpu_utilisation_hourly")
    op.execute(ALLOCATION_SPANS)
    op.execute(usage_daily(dialect))
    op.execute(GPU_UTILISATION_HOURLY)


def downgrade() -> None:
    """Back to 0008's usage_daily and 0004's gpu_utilisation_hourly."""
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS gpu_utilisation_hourly")
    op.execute("DROP VIEW IF EXISTS usage_daily")
    op.execute("DROP VIEW IF EXISTS allocation_spans")
    hourly = importlib.import_module("db.migrations.versions.0004_gpu_utilisation_hourly")
    daily = importlib.import_module("db.migrations.versions.0008_usage_daily")
    op.execute(hourly.VIEW_SQL)
    op.execute(daily.view_sql(dialect))
