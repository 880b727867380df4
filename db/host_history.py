"""Host history over a time range: raw host samples, or per-bucket aggregates computed in SQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Float, Select, cast, func, literal, literal_column, select
from sqlalchemy.orm import Session

from db.models import Host, HostSample
from db.rows import HostHistoryPoint


def host_history(
    session: Session,
    *,
    since_ms: int,
    until_ms: int,
    host: str | None = None,
    bucket_s: int | None = None,
    limit: int | None = None,
) -> list[HostHistoryPoint]:
    """Host samples with since_ms <= ts < until_ms, ordered by time and host name.

    With `bucket_s`, samples are grouped per host into buckets of that many seconds.
    Raises ValueError for a non-positive bucket_s or limit.
    """
    if bucket_s is not None and bucket_s <= 0:
        raise ValueError(f"bucket size must be a positive number of seconds, not {bucket_s}")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    query = _bucketed(bucket_s * 1000) if bucket_s is not None else _raw()
    query = query.join(Host, Host.id == HostSample.host_id)
    query = query.where(HostSample.ts >= since_ms, HostSample.ts < until_ms)
    if host is not None:
        query = query.where(Host.name == host)
    if limit is not None:
        query = query.limit(limit)
    points: list[HostHistoryPoint] = []
    for row in session.execute(query):
        span_s = (row.ts_last - row.ts_first) / 1000 if row.samples > 1 else 0
        points.append(HostHistoryPoint(
            host=row.host,
            ts_ms=int(row.ts_ms),
            samples=int(row.samples),
            load_1m_avg=row.load_1m_avg,
            load_1m_max=row.load_1m_max,
            cpu_busy_avg=row.cpu_busy_avg,
            cpu_busy_max=row.cpu_busy_max,
            memory_available_min=_int(row.memory_available_min),
            memory_available_avg=row.memory_available_avg,
            net_rx_bytes=_int(row.net_rx_max),
            net_tx_bytes=_int(row.net_tx_max),
            net_rx_bps=_rate(row.net_rx_max, row.net_rx_min, span_s),
            net_tx_bps=_rate(row.net_tx_max, row.net_tx_min, span_s),
        ))
    return points


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _rate(high: Any, low: Any, span_s: float) -> float | None:
    if high is None or low is None or span_s <= 0:
        return None
    return (int(high) - int(low)) / span_s


def _raw() -> Select[*tuple[Any, ...]]:
    sample = HostSample
    return select(
        Host.name.label("host"),
        sample.ts.label("ts_ms"),
        literal(1).label("samples"),
        sample.ts.label("ts_first"),
        sample.ts.label("ts_last"),
        sample.load_1m.label("load_1m_avg"),
        sample.load_1m.label("load_1m_max"),
        sample.cpu_busy_pct.label("cpu_busy_avg"),
        sample.cpu_busy_pct.label("cpu_busy_max"),
        sample.memory_available_bytes.label("memory_available_min"),
        cast(sample.memory_available_bytes, Float).label("memory_available_avg"),
        sample.net_rx_bytes.label("net_rx_max"),
        sample.net_rx_bytes.label("net_rx_min"),
        sample.net_tx_bytes.label("net_tx_max"),
        sample.net_tx_bytes.label("net_tx_min"),
    ).order_by(sample.ts, Host.name)


def _bucketed(bucket_ms: int) -> Select[*tuple[Any, ...]]:
    """One point per host and bucket; the width is inlined so SELECT and GROUP BY match."""
    sample = HostSample
    width = literal_column(str(int(bucket_ms)), BigInteger)
    bucket_start = ((sample.ts // width) * width).label("ts_ms")
    return (
        select(
            Host.name.label("host"),
            bucket_start,
            func.count().label("samples"),
            func.min(sample.ts).label("ts_first"),
            func.max(sample.ts).label("ts_last"),
            cast(func.avg(sample.load_1m), Float).label("load_1m_avg"),
            func.max(sample.load_1m).label("load_1m_max"),
            cast(func.avg(sample.cpu_busy_pct), Float).label("cpu_busy_avg"),
            func.max(sample.cpu_busy_pct).label("cpu_busy_max"),
            func.min(sample.memory_available_bytes).label("memory_available_min"),
            cast(func.avg(sample.memory_available_bytes), Float).label("memory_available_avg"),
            func.max(sample.net_rx_bytes).label("net_rx_max"),
            func.min(sample.net_rx_bytes).label("net_rx_min"),
            func.max(sample.net_tx_bytes).label("net_tx_max"),
            func.min(sample.net_tx_bytes).label("net_tx_min"),
        )
        .group_by(sample.host_id, bucket_start, Host.name)
        .order_by(bucket_start, Host.name)
    )
