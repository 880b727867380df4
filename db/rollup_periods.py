"""The rollup periods' widths and the readings they aggregate; importing it loads no SQLAlchemy."""

from __future__ import annotations

MINUTE_MS = 60_000
FIVE_MINUTES_MS = 300_000
# The readings a rollup row keeps per period: `{reading}_avg`, `{reading}_max` and
# `{reading}_samples` (how many samples had it) in gpu_samples_1m and gpu_samples_5m. In the
# order of GpuHistoryPoint's fields, which the history queries select them in.
READINGS = ("util", "mem_used", "temp", "power")
