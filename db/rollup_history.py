"""Bucketed GPU history read from the 1-minute rollups, with only the unrolled edges from raw.

A bucket of whole minutes is answered from gpu_samples_1m when all its minutes are rolled up:
counts are summed, maxima taken, and each mean is the mean of the minutes' means weighted by
how many samples had that reading, so the points equal gpu_history's over the raw samples
(exactly for counts and maxima; means up to floating-point rounding, tested within 1e-9).
Raw samples answer the bucket holding the rollup watermark and those after it, and a first
bucket that `since_ms` cuts. Before the oldest raw sample (pruned) the rollups are all there is.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import BigInteger, Float, Select, case, cast, func, literal_column, null, select
from sqlalchemy.orm import Session

from db.history import HOST_INDEX_PATTERN, gpu_history, history_points
from db.models import Gpu, GpuSample, GpuSampleMinute, Host
from db.retention import MINUTE_MS
from db.types import GpuHistoryPoint


def gpu_history_with_rollups(
    session: Session,
    *,
    since_ms: int,
    until_ms: int,
    host: str | None = None,
    gpu: str | None = None,
    bucket_s: int | None = None,
    limit: int | None = None,
) -> list[GpuHistoryPoint]:
    """db.history.gpu_history's points, with every rolled-up bucket read from gpu_samples_1m.

    Only for `bucket_s` a whole number of minutes; raw (unbucketed) queries, other bucket
    sizes and databases without rollups go to gpu_history unchanged. Samples stored after
    their minute was rolled up (later than the retention pass's lag) are not in the rollups.
    """
    arguments: dict[str, Any] = {"host": host, "gpu": gpu, "bucket_s": bucket_s}
    if bucket_s is None or bucket_s <= 0 or bucket_s % 60 != 0:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, limit=limit,
                           **arguments)
    # The newest rollup minute's end and the oldest raw sample, in one statement.
    newest_bucket, oldest_raw = session.connection().execute(select(
        select(func.max(GpuSampleMinute.bucket_ts)).scalar_subquery(),
        select(func.min(GpuSample.ts)).scalar_subquery())).one()
    if newest_bucket is None:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, limit=limit,
                           **arguments)
    watermark = int(newest_bucket) + MINUTE_MS
    width_ms = bucket_s * 1000
    if oldest_raw is None or since_ms < oldest_raw:
        rolled_from = since_ms  # raw samples are pruned there: rollups are all there is
    else:
        rolled_from = -(-since_ms // width_ms) * width_ms  # the first bucket wholly in range
    rolled_until = (min(until_ms, watermark) // width_ms) * width_ms
    if rolled_until <= rolled_from:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, limit=limit,
                           **arguments)
    points: list[GpuHistoryPoint] = []
    for start, end, rolled in ((since_ms, rolled_from, False), (rolled_from, rolled_until, True),
                               (rolled_until, until_ms, False)):
        remaining = None if limit is None else limit - len(points)
        if start >= end or remaining == 0:
            continue
        if rolled:
            points += _rollup_points(session, start, end, host, gpu, width_ms, remaining)
        else:
            points += gpu_history(session, since_ms=start, until_ms=end, limit=remaining,
                                  **arguments)
    return points


def _rollup_points(session: Session, since_ms: int, until_ms: int, host: str | None,
                   gpu: str | None, width_ms: int, limit: int | None) -> list[GpuHistoryPoint]:
    query = _rollup_query(width_ms).join(Gpu, Gpu.id == GpuSampleMinute.gpu_id)
    query = query.join(Host, Host.id == Gpu.host_id)
    query = query.where(GpuSampleMinute.bucket_ts >= since_ms, GpuSampleMinute.bucket_ts < until_ms)
    if host is not None:
        query = query.where(Host.name == host)
    if gpu is not None:
        match = HOST_INDEX_PATTERN.fullmatch(gpu)
        if match is not None:
            query = query.where(Host.name == match["host"], Gpu.idx == int(match["idx"]))
        else:
            query = query.where(Gpu.uuid == gpu)
    if limit is not None:
        query = query.limit(limit)
    return history_points(session.connection().execute(query).all())


def _weighted_avg(average: Any, count: Any) -> Any:
    """Mean of the minutes' means weighted by how many samples had the reading.

    A minute rolled up before its counts existed (count NULL) weighs its sample count when
    it has a mean; minutes without the reading weigh nothing (NULL when no minute has it).
    """
    weight = func.coalesce(count, GpuSampleMinute.samples)
    total = cast(func.sum(average * weight), Float)
    return total / func.nullif(func.sum(case((average.is_(None), null()), else_=weight)), 0)


@lru_cache(maxsize=32)
def _rollup_query(width_ms: int) -> Select[*tuple[Any, ...]]:
    """One point per GPU and bucket of whole minutes (width inlined so GROUP BY text matches);
    kept per width, as db.history keeps its raw queries (building it costs milliseconds)."""
    if width_ms % MINUTE_MS:
        raise ValueError(f"rollup buckets must be whole minutes, not {width_ms} ms")
    rollup = GpuSampleMinute
    width = literal_column(str(int(width_ms)), BigInteger)
    bucket_start = ((rollup.bucket_ts // width) * width).label("ts_ms")
    return (
        select(
            Host.name.label("host"),
            Gpu.idx.label("gpu_idx"),
            Gpu.uuid.label("uuid"),
            rollup.gpu_id.label("gpu_id"),
            bucket_start,
            func.sum(rollup.samples).label("samples"),
            _weighted_avg(rollup.util_avg, rollup.util_samples).label("util_avg"),
            func.max(rollup.util_max).label("util_max"),
            _weighted_avg(rollup.mem_used_avg, rollup.mem_used_samples).label("mem_used_avg"),
            func.max(rollup.mem_used_max).label("mem_used_max"),
            _weighted_avg(rollup.temp_avg, rollup.temp_samples).label("temp_avg"),
            func.max(rollup.temp_max).label("temp_max"),
            _weighted_avg(rollup.power_avg, rollup.power_samples).label("power_avg"),
            func.max(rollup.power_max).label("power_max"),
        )
        .group_by(rollup.gpu_id, bucket_start, Host.name, Gpu.idx, Gpu.uuid)
        .order_by(bucket_start, Host.name, Gpu.idx)
    )
