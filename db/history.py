"""GPU history over a time range: raw samples, or per-bucket aggregates computed in SQL."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    Select,
    Subquery,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    select,
)
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
    gpu_ids = matching_gpu_ids(session, host=host, gpu=gpu)
    return _raw_history(session, since_ms=since_ms, until_ms=until_ms, gpu_ids=gpu_ids,
                       bucket_ms=None if bucket_s is None else bucket_s * 1000, limit=limit)


def matching_gpu_ids(session: Session, *, host: str | None, gpu: str | None) -> list[int] | None:
    """Ids of the GPUs that `host` and `gpu` (UUID or "HOST:IDX") name; None without either.

    Resolved before the history query so that it filters on gpu_id with known values, which
    both planners turn into a range scan of (gpu_id, ts) instead of a scan of every GPU's
    samples in the time range joined to the one wanted.
    """
    if host is None and gpu is None:
        return None
    shape, parameters = gpu_filter(host, gpu)
    return list(session.connection().execute(_gpu_ids_query(*shape), parameters).scalars())


@lru_cache(maxsize=8)
def _gpu_ids_query(by_host: bool, by_gpu: bool, by_index: bool) -> Select[int]:
    return (select(Gpu.id).join(Host, Host.id == Gpu.host_id)
            .where(*gpu_filter_terms(by_host, by_gpu, by_index)))


def gpu_filter(host: str | None, gpu: str | None) -> tuple[tuple[bool, bool, bool], dict[str, Any]]:
    """The shape (by host, by GPU, by host:index) of a host/GPU filter, and its bound values."""
    match = None if gpu is None else HOST_INDEX_PATTERN.fullmatch(gpu)
    parameters = {"host": host, "gpu_host": match["host"] if match else None,
                  "idx": int(match["idx"]) if match else None, "uuid": gpu}
    return (host is not None, gpu is not None, match is not None), parameters


@lru_cache(maxsize=8)
def gpu_filter_terms(by_host: bool, by_gpu: bool, by_index: bool) -> tuple[Any, ...]:
    """WHERE terms on gpus joined to hosts for one shape of gpu_filter, values bound later."""
    terms: list[Any] = []
    if by_host:
        terms.append(Host.name == bindparam("host"))
    if by_gpu and by_index:
        terms += [Host.name == bindparam("gpu_host"), Gpu.idx == bindparam("idx")]
    elif by_gpu:
        terms.append(Gpu.uuid == bindparam("uuid"))
    return tuple(terms)


def _raw_history(session: Session, *, since_ms: int, until_ms: int, gpu_ids: list[int] | None,
                bucket_ms: int | None, limit: int | None) -> list[GpuHistoryPoint]:
    """gpu_history's points from the raw samples, for GPUs already resolved to ids."""
    if gpu_ids is not None and not gpu_ids:
        return []
    filtered, limited = gpu_ids is not None, limit is not None
    query = (_raw(filtered, limited) if bucket_ms is None
             else _bucketed(bucket_ms, filtered, limited))
    parameters: dict[str, Any] = {"since_ms": since_ms, "until_ms": until_ms,
                                  "gpu_ids": gpu_ids, "limit": limit}
    return history_points(session.connection().execute(query, parameters).all())


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


def bucket_points(points: Subquery, limited: bool) -> Select[Any]:
    """Named, ordered points from a subquery of (gpu_id, ts_ms, samples, avg/max...) per bucket.

    The names are joined after grouping, so the sort and the aggregation carry two integers
    per row rather than the host name and UUID.
    """
    query = (
        select(Host.name.label("host"), Gpu.idx.label("gpu_idx"), Gpu.uuid.label("uuid"),
               *points.c)
        .join_from(points, Gpu, Gpu.id == points.c.gpu_id)
        .join(Host, Host.id == Gpu.host_id)
        .order_by(points.c.ts_ms, Host.name, Gpu.idx)
    )
    return limited_by(query, limited)


def limited_by(query: Select[Any], limited: bool) -> Select[Any]:
    """`query` with the LIMIT bound at execution as `limit`, when there is one."""
    return query.limit(bindparam("limit", type_=Integer)) if limited else query


def time_range(column: Any, gpu_column: Any, filtered: bool, stretch: str = "") -> list[Any]:
    """The WHERE terms every history query has: since_ms <= column < until_ms, the GPU ids
    (`stretch` suffixes the bound names, for a query of several time ranges)."""
    terms = [column >= bindparam(f"since_ms{stretch}", type_=BigInteger),
             column < bindparam(f"until_ms{stretch}", type_=BigInteger)]
    if filtered:
        terms.append(gpu_column.in_(bindparam("gpu_ids", expanding=True)))
    return terms


@lru_cache(maxsize=4)
def _raw(filtered: bool, limited: bool) -> Select[Any]:
    """One point per sample: avg and max are the sample's own value."""
    query = select(
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
    ).join(Gpu, Gpu.id == GpuSample.gpu_id).join(Host, Host.id == Gpu.host_id).where(
        *time_range(GpuSample.ts, GpuSample.gpu_id, filtered)
    ).order_by(GpuSample.ts, Host.name, Gpu.idx)
    return limited_by(query, limited)


@lru_cache(maxsize=64)
def _bucketed(bucket_ms: int, filtered: bool, limited: bool) -> Select[Any]:
    """One point per GPU and bucket, named and ordered. Kept per width and shape, its values
    bound at execution: building it costs ~2 ms of Python, a cached one nothing."""
    return bucket_points(raw_buckets(bucket_ms, filtered).subquery("points"), limited)


def raw_buckets(bucket_ms: int, filtered: bool, stretch: str = "") -> Select[Any]:
    """(gpu_id, ts_ms, samples, avg/max...) per GPU and bucket of raw samples; `//` on integers
    renders integer division on both backends.

    The bucket width is inlined (it is an int) so that the SELECT and GROUP BY expressions are
    identical text, which PostgreSQL requires.
    """
    width = literal_column(str(int(bucket_ms)), BigInteger)
    bucket_start = (GpuSample.ts // width) * width
    return (
        select(
            GpuSample.gpu_id.label("gpu_id"),
            bucket_start.label("ts_ms"),
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
        .where(*time_range(GpuSample.ts, GpuSample.gpu_id, filtered, stretch))
        .group_by(GpuSample.gpu_id, bucket_start)
    )
