"""Retention settings and one retention pass: roll raw GPU samples up, then prune old rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.retention import PruneResult, RollupResult

DAY_S = 86_400


@dataclass(frozen=True)
class RetentionSettings:
    """The `retention:` settings.

    raw_days: raw host and GPU samples kept this long (GPU samples only once rolled up).
    rollup_days: 1-minute GPU rollups kept this long; None keeps them forever.
    rollup_lag_s: minutes are closed this long after they end, so buffered samples land first.
    interval_s: how often the monitor runs a pass.
    """

    raw_days: float = 7.0
    rollup_days: float | None = 365.0
    rollup_lag_s: float = 120.0
    interval_s: float = 300.0

    def __post_init__(self) -> None:
        if self.raw_days <= 0:
            raise ValueError(f"raw_days must be positive, not {self.raw_days:g}")
        if self.rollup_days is not None and self.rollup_days < self.raw_days:
            raise ValueError(f"rollup_days ({self.rollup_days:g}) must be at least raw_days "
                             f"({self.raw_days:g})")
        if self.rollup_lag_s < 0:
            raise ValueError(f"rollup_lag_s must not be negative, not {self.rollup_lag_s:g}")
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {self.interval_s:g}")


@dataclass(frozen=True)
class RetentionResult:
    """What one pass did."""

    rollup: RollupResult
    pruned: PruneResult
    rollup_5m: RollupResult


def apply_retention(session: Session, settings: RetentionSettings, now: float) -> RetentionResult:
    """Roll up complete minutes older than now - rollup_lag_s and the whole 5-minute periods
    they complete, then prune; not committed.

    Run it in its own session (`with database.session() as s: apply_retention(s, ...)`), off
    the event loop (asyncio.to_thread): a first pass over a long history can take seconds.
    """
    from db.retention import (  # the settings need no SQL
        prune_samples_and_rollups,
        rollup_gpu_five_minutes,
        rollup_gpu_minutes,
    )

    now_ms = int(now * 1000)
    rollup = rollup_gpu_minutes(session, until_ms=now_ms - int(settings.rollup_lag_s * 1000))
    rollup_5m = rollup_gpu_five_minutes(session)
    raw_before_ms = now_ms - int(settings.raw_days * DAY_S * 1000)
    rollup_before_ms = (None if settings.rollup_days is None
                        else now_ms - int(settings.rollup_days * DAY_S * 1000))
    pruned = prune_samples_and_rollups(session, raw_before_ms=raw_before_ms,
                                       rollup_before_ms=rollup_before_ms)
    return RetentionResult(rollup, pruned, rollup_5m)
