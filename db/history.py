"""GPU history over a time range: raw samples, or per-bucket aggregates computed in SQL."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from db.sql import SqlReader, bucket_start, in_list
from db.types import GpuHistoryPoint

HOST_INDEX_PATTERN = re.compile(r"(?P<host>.+):(?P<idx>\d+)")
# The columns every bucketed query selects per GPU and bucket, in GpuHistoryPoint's order
# after the names (host, gpu_idx, uuid).
BUCKET_COLUMNS = ("gpu_id", "ts_ms", "samples", "util_avg", "util_max", "mem_used_avg",
                  "mem_used_max", "temp_avg", "temp_max", "power_avg", "power_max")
# Bound-name prefix of the GPU ids in a history query's IN list.
GPU_IDS = "gpu_id"


def gpu_history(
    reader: SqlReader,
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
    gpu_ids = matching_gpu_ids(reader, host=host, gpu=gpu)
    if gpu_ids is not None and not gpu_ids:
        return []
    ids_sql, parameters = gpu_ids_filter(gpu_ids)
    parameters.update(since_ms=since_ms, until_ms=until_ms)
    if limit is not None:
        parameters["limit"] = limit
    limited = limit is not None
    sql = (_raw(ids_sql, limited) if bucket_s is None
           else _bucketed(bucket_s * 1000, ids_sql, limited))
    return history_points(reader.rows(sql, parameters))


def matching_gpu_ids(reader: SqlReader, *, host: str | None, gpu: str | None,
                     ) -> list[int] | None:
    """Ids of the GPUs that `host` and `gpu` (UUID or "HOST:IDX") name; None without either.

    Resolved before the history query so that it filters on gpu_id with known values, which
    both planners turn into a range scan of (gpu_id, ts) instead of a scan of every GPU's
    samples in the time range joined to the one wanted.
    """
    if host is None and gpu is None:
        return None
    shape, parameters = gpu_filter(host, gpu)
    return [int(gpu_id) for gpu_id in reader.scalars(_gpu_ids_sql(*shape), parameters)]


@lru_cache(maxsize=8)
def _gpu_ids_sql(by_host: bool, by_gpu: bool, by_index: bool) -> str:
    return ("SELECT gpus.id FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
            f"WHERE {gpu_filter_sql(by_host, by_gpu, by_index)}")


def gpu_filter(host: str | None, gpu: str | None) -> tuple[tuple[bool, bool, bool], dict[str, Any]]:
    """The shape (by host, by GPU, by host:index) of a host/GPU filter, and the values that
    gpu_filter_sql of that shape binds."""
    match = None if gpu is None else HOST_INDEX_PATTERN.fullmatch(gpu)
    parameters: dict[str, Any] = {}
    if host is not None:
        parameters["host"] = host
    if match is not None:
        parameters.update(gpu_host=match["host"], idx=int(match["idx"]))
    elif gpu is not None:
        parameters["uuid"] = gpu
    return (host is not None, gpu is not None, match is not None), parameters


@lru_cache(maxsize=8)
def gpu_filter_sql(by_host: bool, by_gpu: bool, by_index: bool) -> str:
    """WHERE terms on gpus joined to hosts for one shape of gpu_filter (at least one of host
    and GPU), its values bound as :host, :gpu_host and :idx, or :uuid."""
    terms: list[str] = []
    if by_host:
        terms.append("hosts.name = :host")
    if by_gpu and by_index:
        terms += ["hosts.name = :gpu_host", "gpus.idx = :idx"]
    elif by_gpu:
        terms.append("gpus.uuid = :uuid")
    if not terms:
        raise ValueError("a GPU filter needs a host or a GPU")
    return " AND ".join(terms)


def gpu_ids_filter(gpu_ids: Sequence[int] | None) -> tuple[str | None, dict[str, Any]]:
    """The placeholders of an IN list of `gpu_ids` (None: no filter), and their bindings.

    The placeholders are part of a query's shape: a statement is built once per number of ids.
    """
    if gpu_ids is None:
        return None, {}
    return in_list(GPU_IDS, gpu_ids)


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


def bucket_points(points_sql: str, limited: bool) -> str:
    """Named, ordered points from a query of BUCKET_COLUMNS per GPU and bucket.

    The names are joined after grouping, so the sort and the aggregation carry two integers
    per row rather than the host name and UUID.
    """
    columns = ", ".join(f"points.{name}" for name in BUCKET_COLUMNS)
    return (f"SELECT hosts.name, gpus.idx, gpus.uuid, {columns} FROM ({points_sql}) AS points "
            "JOIN gpus ON gpus.id = points.gpu_id JOIN hosts ON hosts.id = gpus.host_id "
            f"ORDER BY points.ts_ms, hosts.name, gpus.idx{limit_sql(limited)}")


def limit_sql(limited: bool) -> str:
    """The LIMIT clause (its value bound as :limit) to end a query with, when there is one."""
    return " LIMIT :limit" if limited else ""


def time_range_sql(column: str, gpu_column: str, ids_sql: str | None, stretch: str = "") -> str:
    """The WHERE terms every history query has: since_ms <= column < until_ms, the GPU ids
    (`ids_sql`, from gpu_ids_filter) when filtered; `stretch` suffixes the bound names, for a
    query of several time ranges."""
    terms = f"{column} >= :since_ms{stretch} AND {column} < :until_ms{stretch}"
    return terms if ids_sql is None else f"{terms} AND {gpu_column} IN ({ids_sql})"


@lru_cache(maxsize=16)
def _raw(ids_sql: str | None, limited: bool) -> str:
    """One point per sample: avg and max are the sample's own value."""
    return (
        "SELECT hosts.name, gpus.idx, gpus.uuid, gpu_samples.gpu_id, gpu_samples.ts, 1, "
        "gpu_samples.utilization_gpu_pct, gpu_samples.utilization_gpu_pct, "
        "CAST(gpu_samples.memory_used_bytes AS FLOAT), gpu_samples.memory_used_bytes, "
        "gpu_samples.temperature_c, gpu_samples.temperature_c, "
        "gpu_samples.power_draw_w, gpu_samples.power_draw_w "
        "FROM gpu_samples JOIN gpus ON gpus.id = gpu_samples.gpu_id "
        "JOIN hosts ON hosts.id = gpus.host_id "
        f"WHERE {time_range_sql('gpu_samples.ts', 'gpu_samples.gpu_id', ids_sql)} "
        f"ORDER BY gpu_samples.ts, hosts.name, gpus.idx{limit_sql(limited)}"
    )


@lru_cache(maxsize=64)
def _bucketed(bucket_ms: int, ids_sql: str | None, limited: bool) -> str:
    """One point per GPU and bucket, named and ordered; kept per width and shape, its values
    bound at execution."""
    return bucket_points(raw_buckets(bucket_ms, ids_sql), limited)


def raw_buckets(bucket_ms: int, ids_sql: str | None, stretch: str = "") -> str:
    """BUCKET_COLUMNS per GPU and bucket of raw samples (db.sql.bucket_start)."""
    start = bucket_start("gpu_samples.ts", bucket_ms)
    return (
        f"SELECT gpu_samples.gpu_id AS gpu_id, {start} AS ts_ms, count(*) AS samples, "
        "CAST(avg(gpu_samples.utilization_gpu_pct) AS FLOAT) AS util_avg, "
        "max(gpu_samples.utilization_gpu_pct) AS util_max, "
        "CAST(avg(gpu_samples.memory_used_bytes) AS FLOAT) AS mem_used_avg, "
        "max(gpu_samples.memory_used_bytes) AS mem_used_max, "
        "CAST(avg(gpu_samples.temperature_c) AS FLOAT) AS temp_avg, "
        "max(gpu_samples.temperature_c) AS temp_max, "
        "CAST(avg(gpu_samples.power_draw_w) AS FLOAT) AS power_avg, "
        "max(gpu_samples.power_draw_w) AS power_max "
        "FROM gpu_samples "
        f"WHERE {time_range_sql('gpu_samples.ts', 'gpu_samples.gpu_id', ids_sql, stretch)} "
        f"GROUP BY gpu_samples.gpu_id, {start}"
    )
