"""Host history over a time range: raw host samples, or per-bucket aggregates computed in SQL.

Plain SQL through a db.sql reader, so `fleet history hosts` on an SQLite file loads no
SQLAlchemy. Buckets start where db.sql.bucket_start says, the same on both backends.
"""

from __future__ import annotations

from typing import Any

from db.rows import HostHistoryPoint
from db.sql import SqlReader, bucket_start

# Columns in the order host_history reads them: host, ts_ms, samples, ts_first, ts_last,
# load_1m avg/max, cpu_busy avg/max, memory_available min/avg, net_rx max/increase,
# net_tx max/increase (a raw sample has no increase: NULL).
_RAW_SELECT = """
SELECT hosts.name, host_samples.ts, 1, host_samples.ts, host_samples.ts,
       host_samples.load_1m, host_samples.load_1m,
       host_samples.cpu_busy_pct, host_samples.cpu_busy_pct,
       host_samples.memory_available_bytes, CAST(host_samples.memory_available_bytes AS FLOAT),
       host_samples.net_rx_bytes, NULL,
       host_samples.net_tx_bytes, NULL
FROM host_samples JOIN hosts ON hosts.id = host_samples.host_id
"""
# The previous reading of a cumulative counter in the same host and bucket: the samples that
# have it, in time order (a sample without it, between two that have it, is skipped).
_PREVIOUS = ("LAG(host_samples.{column}) OVER (PARTITION BY host_samples.host_id, {bucket}, "
             "host_samples.{column} IS NULL ORDER BY host_samples.ts)")
# What a counter grew by since its previous reading. A counter lower than before was reset
# (a reboot, a driver reload, a wrap): it counted its value from 0, as Prometheus' rate()
# takes it. Subtracted as integers (exact), summed as floats (no integer overflow).
_INCREASE = ("sum(CAST(CASE WHEN samples.{column} < samples.{column}_prev "
             "THEN samples.{column} ELSE samples.{column} - samples.{column}_prev END AS FLOAT))")
# {bucket}: the bucket start, the width inlined (not bound) so that SELECT and GROUP BY are
# the same expression to PostgreSQL. {where}: the range (and host) the window functions see.
_BUCKETED_SELECT = f"""
SELECT samples.name, samples.bucket_ts AS ts_ms, count(*), min(samples.ts), max(samples.ts),
       CAST(avg(samples.load_1m) AS FLOAT), max(samples.load_1m),
       CAST(avg(samples.cpu_busy_pct) AS FLOAT), max(samples.cpu_busy_pct),
       min(samples.memory_available_bytes),
       CAST(avg(samples.memory_available_bytes) AS FLOAT),
       max(samples.net_rx_bytes), {_INCREASE.format(column="net_rx_bytes")},
       max(samples.net_tx_bytes), {_INCREASE.format(column="net_tx_bytes")}
FROM (
    SELECT host_samples.host_id, hosts.name, {{bucket}} AS bucket_ts, host_samples.ts,
           host_samples.load_1m, host_samples.cpu_busy_pct,
           host_samples.memory_available_bytes,
           host_samples.net_rx_bytes,
           {_PREVIOUS.format(column="net_rx_bytes", bucket="{bucket}")} AS net_rx_bytes_prev,
           host_samples.net_tx_bytes,
           {_PREVIOUS.format(column="net_tx_bytes", bucket="{bucket}")} AS net_tx_bytes_prev
    FROM host_samples JOIN hosts ON hosts.id = host_samples.host_id
    {{where}}
) AS samples
GROUP BY samples.host_id, samples.bucket_ts, samples.name
ORDER BY ts_ms, samples.name
"""


def host_history(
    reader: SqlReader,
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
    where = "WHERE host_samples.ts >= :since_ms AND host_samples.ts < :until_ms"
    if host is not None:
        where += " AND hosts.name = :host"
    if bucket_s is None:
        sql = f"{_RAW_SELECT}{where} ORDER BY host_samples.ts, hosts.name"
    else:
        bucket = bucket_start("host_samples.ts", int(bucket_s) * 1000)
        sql = _BUCKETED_SELECT.format(bucket=bucket, where=where)
    if limit is not None:
        sql += " LIMIT :limit"
    points: list[HostHistoryPoint] = []
    for (name, ts_ms, samples, ts_first, ts_last, load_1m_avg, load_1m_max, cpu_busy_avg,
         cpu_busy_max, memory_available_min, memory_available_avg, net_rx_max, net_rx_increase,
         net_tx_max, net_tx_increase) in reader.rows(sql, {
             "since_ms": since_ms, "until_ms": until_ms, "host": host, "limit": limit}):
        span_s = (ts_last - ts_first) / 1000 if samples > 1 else 0
        points.append(HostHistoryPoint(
            host=name,
            ts_ms=int(ts_ms),
            samples=int(samples),
            load_1m_avg=load_1m_avg,
            load_1m_max=load_1m_max,
            cpu_busy_avg=cpu_busy_avg,
            cpu_busy_max=cpu_busy_max,
            memory_available_min=_int(memory_available_min),
            memory_available_avg=memory_available_avg,
            net_rx_bytes=_int(net_rx_max),
            net_tx_bytes=_int(net_tx_max),
            net_rx_bps=_rate(net_rx_max, net_rx_increase, span_s),
            net_tx_bps=_rate(net_tx_max, net_tx_increase, span_s),
        ))
    return points


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _rate(reading: Any, increase: Any, span_s: float) -> float | None:
    """A counter's increase per second over the bucket's span: None without a reading or a
    span (one sample), 0 when only one sample had a reading."""
    if reading is None or span_s <= 0:
        return None
    return float(increase or 0) / span_s
