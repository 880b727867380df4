"""GPU history over a time range: raw samples, or per-bucket aggregates computed in SQL."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import BigInteger, Float, Select, cast, func, literal, literal_column, select
from sqlalchemy.orm import Session

from db.models import Gpu, GpuSample, Host
from db.types import GpuHistoryPoint

HOST_INDEX_PATTERN = re.compile(r"(?P<host>.+):(?P<idx>\d+)")


def gpu_history(
    session: Session,
    *,
    since_ms: int,
    until_ms: int,
    host: str | None = None,
    gpu: str | None = None,
    bucket_s: int | None = None,
    limit: int | None = None,
) -> list[GpuHistoryPoint]:
    """GPU samples with since_ms <= ts < until_ms, ordered by time, host name and GPU index.

    `host` keeps one host's GPUs; `gpu` keeps one GPU, by UUID or "HOST:IDX". With `bucket_s`,
    samples are grouped per GPU into buckets [k*bucket_s, (k+1)*bucket_s) seconds (integer
    division on the millisecond ts) and each point holds the bucket start, sample count and
    avg/max of utilization, memory used, temperature and power (NULL values are skipped).
    `limit` caps the number of points returned (the earliest ones).
    Raises ValueError for a non-positive bucket_s or limit.
    """
    if bucket_s is not None and bucket_s <= 0:
        raise ValueError(f"bucket size must be a positive number of seconds, not {bucket_s}")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    query = _bucketed(bucket_s * 1000) if bucket_s is not None else _raw()
    query = query.join(Gpu, Gpu.id == GpuSample.gpu_id).join(Host, Host.id == Gpu.host_id)
    query = query.where(GpuSample.ts >= since_ms, GpuSample.ts < until_ms)
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


def history_points(rows: Sequence[Sequence[Any]]) -> list[GpuHistoryPoint]:
    """Points from rows whose columns are GpuHistoryPoint's fields in order (as the queries
    here select them); unpacked by position, several times cheaper than by name."""
    return [
        GpuHistoryPoint(host, gpu_idx, uuid, gpu_id, int(ts_ms), int(samples), util_avg,
                        util_max, mem_used_avg, None if mem_used_max is None else int(mem_used_max),
                        temp_avg, temp_max, power_avg, power_max)
        for (host, gpu_idx, uuid, gpu_id, ts_ms, samples, util_avg, util_max, mem_used_avg,
             mem_used_max, temp_avg, temp_max, power_avg, power_max) in rows
    ]


@lru_cache(maxsize=1)
def _raw() -> Select[tuple[object, ...]]:
    """One point per sample: avg and max are the sample's own value."""
    return select(
        Host.name.label("host"),
        Gpu.idx.label("gpu_idx"),
        Gpu.uuid.label("uuid"),
        GpuSample.gpu_id.label("gpu_id"),
        GpuSample.ts.label("ts_ms"),
        literal(1).label("samples"),
        GpuSample.utilization_gpu_pct.label("util_avg"),
        GpuSample.utilization_gpu_pct.label("util_max"),
        cast(GpuSample.memory_used_bytes, Float).label("mem_used_avg"),
        GpuSample.memory_used_bytes.label("mem_used_max"),
        GpuSample.temperature_c.label("temp_avg"),
        GpuSample.temperature_c.label("temp_max"),
        GpuSample.power_draw_w.label("power_avg"),
        GpuSample.power_draw_w.label("power_max"),
    ).order_by(GpuSample.ts, Host.name, Gpu.idx)


@lru_cache(maxsize=32)
def _bucketed(bucket_ms: int) -> Select[tuple[object, ...]]:
    """One point per GPU and bucket; `//` on integers renders integer division on both backends.

    The bucket width is inlined (it is an int) so that the SELECT and GROUP BY expressions are
    identical text, which PostgreSQL requires. Kept per width: a Select is immutable (each
    .where() makes a new one), and building this one costs ~2 ms of Python per query.
    """
    width = literal_column(str(int(bucket_ms)), BigInteger)
    bucket_start = ((GpuSample.ts // width) * width).label("ts_ms")
    return (
        select(
            Host.name.label("host"),
            Gpu.idx.label("gpu_idx"),
            Gpu.uuid.label("uuid"),
            GpuSample.gpu_id.label("gpu_id"),
            bucket_start,
            func.count().label("samples"),
            cast(func.avg(GpuSample.utilization_gpu_pct), Float).label("util_avg"),
            func.max(GpuSample.utilization_gpu_pct).label("util_max"),
            cast(func.avg(GpuSample.memory_used_bytes), Float).label("mem_used_avg"),
            func.max(GpuSample.memory_used_bytes).label("mem_used_max"),
            cast(func.avg(GpuSample.temperature_c), Float).label("temp_avg"),
            func.max(GpuSample.temperature_c).label("temp_max"),
            cast(func.avg(GpuSample.power_draw_w), Float).label("power_avg"),
            func.max(GpuSample.power_draw_w).label("power_max"),
        )
        .group_by(GpuSample.gpu_id, bucket_start, Host.name, Gpu.idx, Gpu.uuid)
        .order_by(bucket_start, Host.name, Gpu.idx)
    )
