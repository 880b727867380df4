"""The rollup periods' widths, the readings they aggregate, and how far the minutes reach;
importing it loads no SQLAlchemy."""

from __future__ import annotations

from db.sql import SqlReader

MINUTE_MS = 60_000
FIVE_MINUTES_MS = 300_000
# The readings a rollup row keeps per period: `{reading}_avg`, `{reading}_max` and
# `{reading}_samples` (how many samples had it) in gpu_samples_1m and gpu_samples_5m. In the
# order of GpuHistoryPoint's fields, which the history queries select them in.
READINGS = ("util", "mem_used", "temp", "power")


def minute_watermark_ms(reader: SqlReader) -> int | None:
    """End (exclusive) of the rolled-up range: the newest minute's start + 1 minute, or None."""
    newest = reader.scalar("SELECT max(bucket_ts) FROM gpu_samples_1m")
    return None if newest is None else int(newest) + MINUTE_MS
