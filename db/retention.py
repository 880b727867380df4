"""Rolling raw GPU samples up into 1-minute and 5-minute buckets, and pruning old rows.

Idempotent by construction: the rollup covers only complete minutes after the newest bucket
already in gpu_samples_1m (the watermark), so running it twice over the same range adds nothing,
and raw samples are never pruned past the watermark (nothing is deleted before it is rolled up).
The 5-minute periods are summed from the minutes the same way, up to the minutes' watermark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    case,
    cast,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
)
from sqlalchemy.orm import Session

from db.models import (
    Gpu,
    GpuRollupColumns,
    GpuSample,
    GpuSampleFiveMinutes,
    GpuSampleMinute,
    HostSample,
)
from db.rollup_periods import FIVE_MINUTES_MS, MINUTE_MS, READINGS, minute_watermark_ms
from db.sql import SessionReader

# How far back the first 5-minute pass reaches into minutes rolled up before the periods
# existed (as migration 0014 does): older buckets keep being read from the minutes.
FIVE_MINUTE_BACKFILL_MS = 7 * 86_400_000


@dataclass(frozen=True, slots=True)
class RollupResult:
    """What one rollup pass did: buckets written and the range [start_ms, end_ms) it covered."""

    buckets: int
    start_ms: int | None
    end_ms: int | None


@dataclass(frozen=True, slots=True)
class PruneResult:
    """Rows deleted by one prune pass."""

    gpu_samples: int
    host_samples: int
    gpu_rollups: int
    gpu_rollups_5m: int = 0


def rollup_watermark_ms(session: Session) -> int | None:
    """End (exclusive) of the rolled-up range: the newest bucket start + 1 minute, or None."""
    return minute_watermark_ms(SessionReader(session))


def reading_weight(rollup: type[GpuRollupColumns], reading: str) -> Any:
    """What a rollup row's mean of `reading` weighs in a longer period: the samples that had
    the reading (a minute from before migration 0013: its sample count), NULL without a mean."""
    average = getattr(rollup, f"{reading}_avg")
    count = getattr(rollup, f"{reading}_samples")
    return case((average.is_(None), null()), else_=func.coalesce(count, rollup.samples))


def weighted_mean(rollup: type[GpuRollupColumns], reading: str) -> Any:
    """The mean of rollup rows' means of `reading`, each weighted by reading_weight."""
    average = getattr(rollup, f"{reading}_avg")
    weight = reading_weight(rollup, reading)
    return cast(func.sum(average * weight), Float) / func.nullif(func.sum(weight), 0)


def rollup_gpu_minutes(session: Session, *, until_ms: int) -> RollupResult:
    """Aggregate raw GPU samples of every complete minute before `until_ms` not yet rolled up.

    Each (GPU, minute) gets one row: sample count, utilisation avg/max, memory used avg/max,
    temperature avg/max, power avg/max (NULL readings skipped), and per reading how many
    samples had it (what a longer bucket weights this minute's averages by). Pass `until_ms`
    a little in the past (e.g. now minus two flush intervals) so samples still buffered by the
    monitor have landed before their minute is closed. Not committed: the caller's session decides.
    """
    end_ms = (until_ms // MINUTE_MS) * MINUTE_MS
    start_ms = rollup_watermark_ms(session)
    if start_ms is None:
        oldest = session.scalar(select(func.min(GpuSample.ts)))
        if oldest is None:
            return RollupResult(0, None, None)
        start_ms = (int(oldest) // MINUTE_MS) * MINUTE_MS
    if start_ms >= end_ms:
        return RollupResult(0, start_ms, start_ms)
    width = literal_column(str(MINUTE_MS), BigInteger)
    bucket = ((GpuSample.ts // width) * width).label("bucket_ts")
    source = (
        select(
            GpuSample.gpu_id,
            bucket,
            func.count().label("samples"),
            cast(func.avg(GpuSample.utilization_gpu_pct), Float),
            func.max(GpuSample.utilization_gpu_pct),
            func.max(GpuSample.memory_used_bytes),
            cast(func.avg(GpuSample.temperature_c), Float),
            func.max(GpuSample.temperature_c),
            cast(func.avg(GpuSample.power_draw_w), Float),
            func.max(GpuSample.power_draw_w),
            cast(func.avg(GpuSample.memory_used_bytes), Float),
            func.count(GpuSample.utilization_gpu_pct),
            func.count(GpuSample.memory_used_bytes),
            func.count(GpuSample.temperature_c),
            func.count(GpuSample.power_draw_w),
        )
        # Samples of a missing GPU (no foreign key refuses them, see db.references) are not
        # rolled up: the rollup's own key to gpus would fail the whole pass.
        .join(Gpu, Gpu.id == GpuSample.gpu_id)
        .where(GpuSample.ts >= start_ms, GpuSample.ts < end_ms)
        .group_by(GpuSample.gpu_id, bucket)
    )
    statement = insert(GpuSampleMinute).from_select(
        ["gpu_id", "bucket_ts", "samples", "util_avg", "util_max", "mem_used_max", "temp_avg",
         "temp_max", "power_avg", "power_max", "mem_used_avg", "util_samples",
         "mem_used_samples", "temp_samples", "power_samples"],
        source,
    )
    # psycopg resets an INSERT ... SELECT's rowcount when its cursor closes unless kept.
    result = session.execute(statement, execution_options={"preserve_rowcount": True})
    return RollupResult(int(result.rowcount or 0), start_ms, end_ms)  # type: ignore[attr-defined]


def five_minute_watermark_ms(session: Session) -> int | None:
    """End (exclusive) of the 5-minute periods rolled up: the newest start + 5 minutes, or None."""
    newest = session.scalar(select(func.max(GpuSampleFiveMinutes.bucket_ts)))
    return None if newest is None else int(newest) + FIVE_MINUTES_MS


def rollup_gpu_five_minutes(session: Session) -> RollupResult:
    """Sum the minute rollups of every whole 5-minute period before their watermark that is
    not rolled up yet: counts and weights summed, maxima taken, means weighted (weighted_mean),
    so any bucket of whole periods reads the same from either level. With no period yet, the
    first pass starts at most FIVE_MINUTE_BACKFILL_MS back. Not committed.
    """
    minutes_end = rollup_watermark_ms(session)
    if minutes_end is None:
        return RollupResult(0, None, None)
    end_ms = (minutes_end // FIVE_MINUTES_MS) * FIVE_MINUTES_MS
    start_ms = five_minute_watermark_ms(session)
    if start_ms is None:
        oldest = int(session.scalar(select(func.min(GpuSampleMinute.bucket_ts))) or 0)
        start_ms = max((oldest // FIVE_MINUTES_MS) * FIVE_MINUTES_MS,
                       end_ms - FIVE_MINUTE_BACKFILL_MS)
    if start_ms >= end_ms:
        return RollupResult(0, start_ms, start_ms)
    minute = GpuSampleMinute
    width = literal_column(str(FIVE_MINUTES_MS), BigInteger)
    period = (minute.bucket_ts // width) * width
    columns: list[Any] = [minute.gpu_id, period, func.sum(minute.samples)]
    names = ["gpu_id", "bucket_ts", "samples"]
    for reading in READINGS:
        columns += [weighted_mean(minute, reading),
                    func.max(getattr(minute, f"{reading}_max")),
                    func.coalesce(func.sum(reading_weight(minute, reading)), 0)]
        names += [f"{reading}_avg", f"{reading}_max", f"{reading}_samples"]
    source = (select(*columns)
              .where(minute.bucket_ts >= start_ms, minute.bucket_ts < end_ms)
              .group_by(minute.gpu_id, period))
    result = session.execute(insert(GpuSampleFiveMinutes).from_select(names, source),
                             execution_options={"preserve_rowcount": True})
    return RollupResult(int(result.rowcount or 0), start_ms, end_ms)  # type: ignore[attr-defined]


def prune_samples_and_rollups(session: Session, *, raw_before_ms: int,
                              rollup_before_ms: int | None) -> PruneResult:
    """Delete raw samples with ts < raw_before_ms, but never GPU samples not yet rolled up,
    and rollup buckets older than rollup_before_ms (None keeps them all): minutes before it,
    and 5-minute periods that start before it. Not committed.
    """
    watermark = rollup_watermark_ms(session)
    gpu_cutoff = raw_before_ms if watermark is None else min(raw_before_ms, watermark)
    if watermark is None:
        # Nothing is rolled up yet: keep every GPU sample rather than lose history.
        gpu_deleted = 0
    else:
        gpu_result = session.execute(delete(GpuSample).where(GpuSample.ts < gpu_cutoff))
        gpu_deleted = int(gpu_result.rowcount or 0)  # type: ignore[attr-defined]
    host_result = session.execute(delete(HostSample).where(HostSample.ts < raw_before_ms))
    rollups_deleted = periods_deleted = 0
    if rollup_before_ms is not None:
        rollup_result = session.execute(
            delete(GpuSampleMinute).where(GpuSampleMinute.bucket_ts < rollup_before_ms)
        )
        rollups_deleted = int(rollup_result.rowcount or 0)  # type: ignore[attr-defined]
        # A period whose first minutes go goes with them: the minutes left answer its bucket,
        # the same for every bucket width.
        periods_before_ms = -(-rollup_before_ms // FIVE_MINUTES_MS) * FIVE_MINUTES_MS
        period_result = session.execute(delete(GpuSampleFiveMinutes).where(
            GpuSampleFiveMinutes.bucket_ts < periods_before_ms))
        periods_deleted = int(period_result.rowcount or 0)  # type: ignore[attr-defined]
    return PruneResult(
        gpu_samples=gpu_deleted,
        host_samples=int(host_result.rowcount or 0),  # type: ignore[attr-defined]
        gpu_rollups=rollups_deleted,
        gpu_rollups_5m=periods_deleted,
    )
