"""GPU history reaching past raw retention: old buckets are read from the 1-minute rollups."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Float, Select, case, cast, func, literal_column, null, select
from sqlalchemy.orm import Session

from db.history import HOST_INDEX_PATTERN, gpu_history
from db.models import Gpu, GpuSample, GpuSampleMinute, Host
from db.retention import MINUTE_MS, rollup_watermark_ms
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
    """Like db.history.gpu_history, but bucketed ranges older than the oldest raw sample are
    answered from gpu_samples_1m (whole buckets up to the rollup watermark), the rest from raw.

    Used only when `bucket_s` is a whole number of minutes; raw (unbucketed) queries and ranges
    raw samples still cover go to gpu_history unchanged. Rollup points have mem_used_avg None
    (rollups keep only the maximum) and averages weighted by each minute's sample count.
    """
    arguments: dict[str, Any] = {"host": host, "gpu": gpu, "bucket_s": bucket_s, "limit": limit}
    if bucket_s is None or bucket_s <= 0 or bucket_s % 60 != 0:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, **arguments)
    oldest_raw = session.scalar(select(func.min(GpuSample.ts)))
    watermark = rollup_watermark_ms(session)
    if watermark is None or (oldest_raw is not None and since_ms >= oldest_raw):
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, **arguments)
    width_ms = bucket_s * 1000
    boundary = min(until_ms, (watermark // width_ms) * width_ms)
    if boundary <= since_ms:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, **arguments)
    older = _rollup_points(session, since_ms, boundary, host, gpu, width_ms, limit)
    if limit is not None and len(older) >= limit:
        return older[:limit]
    remaining = None if limit is None else limit - len(older)
    newer = gpu_history(session, since_ms=boundary, until_ms=until_ms, host=host, gpu=gpu,
                        bucket_s=bucket_s, limit=remaining)
    return older + newer


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
    return [
        GpuHistoryPoint(
            host=row.host, gpu_idx=row.gpu_idx, uuid=row.uuid, gpu_id=row.gpu_id,
            ts_ms=int(row.ts_ms), samples=int(row.samples), util_avg=row.util_avg,
            util_max=row.util_max, mem_used_avg=None,
            mem_used_max=None if row.mem_used_max is None else int(row.mem_used_max),
            temp_avg=row.temp_avg, temp_max=row.temp_max, power_avg=row.power_avg,
            power_max=row.power_max,
        )
        for row in session.execute(query)
    ]


def _weighted_avg(column: Any) -> Any:
    """Average of per-minute averages weighted by sample count, skipping minutes without data."""
    weight = case((column.is_(None), null()), else_=GpuSampleMinute.samples)
    total = cast(func.sum(column * GpuSampleMinute.samples), Float)
    return total / func.nullif(func.sum(weight), 0)


def _rollup_query(width_ms: int) -> Select[*tuple[Any, ...]]:
    """One point per GPU and bucket of whole minutes (width inlined so GROUP BY text matches)."""
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
            _weighted_avg(rollup.util_avg).label("util_avg"),
            func.max(rollup.util_max).label("util_max"),
            func.max(rollup.mem_used_max).label("mem_used_max"),
            _weighted_avg(rollup.temp_avg).label("temp_avg"),
            func.max(rollup.temp_max).label("temp_max"),
            _weighted_avg(rollup.power_avg).label("power_avg"),
            func.max(rollup.power_max).label("power_max"),
        )
        .group_by(rollup.gpu_id, bucket_start, Host.name, Gpu.idx, Gpu.uuid)
        .order_by(bucket_start, Host.name, Gpu.idx)
    )
