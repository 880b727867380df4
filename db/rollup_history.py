"""Bucketed GPU history read from the rollups, with only the unrolled edges from raw.

A bucket of whole minutes is answered from gpu_samples_1m when all its minutes are rolled up,
and a bucket of whole 5-minute periods from gpu_samples_5m when those are: counts are summed,
maxima taken, and each mean is the mean of the rows' means weighted by how many samples had
that reading, so the points equal gpu_history's over the raw samples (exactly for counts and
maxima; means up to floating-point rounding, tested within 1e-9). Raw samples answer the
bucket holding the minutes' watermark and those after it, and a first bucket that `since_ms`
cuts. Before the oldest raw sample (pruned) the rollups are all there is, and they answer a
bucket cut by the range's end too when no raw sample is left there. Not handled: raw samples
pruned into the watermark's bucket with newer ones after it (that bucket is read from raw).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from db.history import (
    BUCKET_COLUMNS,
    bucket_points,
    gpu_filter,
    gpu_filter_sql,
    gpu_history,
    gpu_ids_filter,
    history_points,
    limit_sql,
    matching_gpu_ids,
    raw_buckets,
    time_range_sql,
)
from db.rollup_periods import FIVE_MINUTES_MS, MINUTE_MS, READINGS
from db.sql import SqlReader, bucket_start
from db.types import GpuHistoryPoint

# The rollup tables; a stretch of buckets is read from one of them, or from raw (None).
LEVELS = ("gpu_samples_1m", "gpu_samples_5m")
Source = str | None


def gpu_history_with_rollups(
    reader: SqlReader,
    *,
    since_ms: int,
    until_ms: int,
    host: str | None = None,
    gpu: str | None = None,
    bucket_s: int | None = None,
    limit: int | None = None,
) -> list[GpuHistoryPoint]:
    """db.history.gpu_history's points, with every rolled-up bucket read from the rollups.

    Only for `bucket_s` a whole number of minutes; raw (unbucketed) queries, other bucket
    sizes and databases without rollups go to gpu_history unchanged. Samples stored after
    their minute was rolled up (later than the retention pass's lag) are not in the rollups.
    """
    arguments: dict[str, Any] = {"host": host, "gpu": gpu, "bucket_s": bucket_s}
    if bucket_s is None or bucket_s <= 0 or bucket_s % 60 != 0:
        return gpu_history(reader, since_ms=since_ms, until_ms=until_ms, limit=limit,
                           **arguments)
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    shape, gpu_parameters = gpu_filter(host, gpu)
    (row,) = reader.rows(_watermarks_sql(*shape), gpu_parameters)  # aggregates: one row
    oldest_period, newest_period, newest_minute, oldest_raw = row[:4]
    periods = None if newest_period is None else (int(oldest_period), int(newest_period))
    gpu_ids: list[int] | None = None
    names: tuple[str, int, str | None] | None = None  # of the one GPU the filter names
    if any(shape):
        count, first_id = row[4:6]
        if count == 1:
            gpu_ids, names = [int(first_id)], (row[6], int(row[7]), row[8])
        else:
            gpu_ids = [] if not count else matching_gpu_ids(reader, host=host, gpu=gpu)
    if gpu_ids is not None and not gpu_ids:
        return []
    stretches = [(start, end, source) for start, end, source in _stretches(
        since_ms, until_ms, bucket_s * 1000, periods, newest_minute, oldest_raw)
        if start < end]
    if not stretches:
        return []
    ids_sql, parameters = gpu_ids_filter(gpu_ids)
    if limit is not None:
        parameters["limit"] = limit
    for index, (start, end, _) in enumerate(stretches):
        parameters[f"since_ms_{index}"] = start
        parameters[f"until_ms_{index}"] = end
    sql = _stretches_sql(tuple(source for _, _, source in stretches), bucket_s * 1000,
                         ids_sql, limit is not None, names is None)
    rows: Sequence[Sequence[Any]] = reader.rows(sql, parameters)
    if names is not None:
        rows = [(*names, *bucket) for bucket in rows]
    return history_points(rows)


@lru_cache(maxsize=8)
def _watermarks_sql(by_host: bool, by_gpu: bool, by_index: bool) -> str:
    """The oldest and newest 5-minute period, the newest minute and the oldest raw sample;
    with a GPU filter, also how many GPUs it names and, for one, its id, host name, index and
    UUID: one round trip before the history's own, which then needs neither the names nor a
    join."""
    watermarks = ("SELECT (SELECT min(bucket_ts) FROM gpu_samples_5m), "
                  "(SELECT max(bucket_ts) FROM gpu_samples_5m), "
                  "(SELECT max(bucket_ts) FROM gpu_samples_1m), "
                  "(SELECT min(ts) FROM gpu_samples)")
    if not (by_host or by_gpu):
        return watermarks
    return (f"{watermarks}, named.gpus, named.first_id, named.host, named.idx, named.uuid "
            "FROM (SELECT count(gpus.id) AS gpus, min(gpus.id) AS first_id, "
            "min(hosts.name) AS host, min(gpus.idx) AS idx, min(gpus.uuid) AS uuid "
            "FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
            f"WHERE {gpu_filter_sql(by_host, by_gpu, by_index)}) AS named")


def _stretches(since_ms: int, until_ms: int, width_ms: int, periods: tuple[int, int] | None,
               newest_minute: int | None, oldest_raw: int | None,
               ) -> list[tuple[int, int, Source]]:
    """[start, end) stretches of whole buckets and where each is read, in time order.

    Minutes serve the buckets all of whose minutes are rolled up; 5-minute periods (`periods`:
    the oldest and newest period start), when the width is a multiple of 5 minutes, the whole
    buckets among those that lie between the oldest period and the periods' watermark (they
    are rolled up in order and pruned from the old end, so there they are all there); raw
    samples the rest, and everything when nothing is rolled up. Where raw samples are pruned
    at an end of the range, the minutes answer its cut bucket there.
    """
    if newest_minute is None:
        return [(since_ms, until_ms, None)]
    if oldest_raw is None or since_ms < oldest_raw:
        rolled_from = since_ms  # raw samples are pruned there: rollups are all there is
    else:
        rolled_from = -(-since_ms // width_ms) * width_ms  # the first bucket wholly in range
    minutes_end = min(until_ms, newest_minute + MINUTE_MS)
    if oldest_raw is None or until_ms <= oldest_raw:
        rolled_until = minutes_end  # nor are there raw samples after: rollups to the end
    else:
        rolled_until = (minutes_end // width_ms) * width_ms  # the last bucket wholly rolled
    if rolled_until <= rolled_from:
        return [(since_ms, until_ms, None)]
    rolled: list[tuple[int, int, Source]] = [(rolled_from, rolled_until, "gpu_samples_1m")]
    if periods is not None and width_ms % FIVE_MINUTES_MS == 0:
        oldest_period, newest_period = periods
        periods_from = max(-(-rolled_from // width_ms), -(-oldest_period // width_ms)) * width_ms
        periods_until = min(rolled_until,
                            ((newest_period + FIVE_MINUTES_MS) // width_ms) * width_ms)
        if periods_from < periods_until:
            rolled = [(rolled_from, periods_from, "gpu_samples_1m"),
                      (periods_from, periods_until, "gpu_samples_5m"),
                      (periods_until, rolled_until, "gpu_samples_1m")]
    return [(since_ms, rolled_from, None), *rolled, (rolled_until, until_ms, None)]


@lru_cache(maxsize=128)
def _stretches_sql(sources: tuple[Source, ...], width_ms: int, ids_sql: str | None,
                   limited: bool, named: bool) -> str:
    """One statement for all the stretches: their buckets (disjoint, in time order) unioned,
    then (`named`) named, ordered and limited as one query over the raw samples would be, or
    of one GPU, ordered by time and limited. Kept per shape, its ranges bound at execution
    as since_ms_N and until_ms_N."""
    points = " UNION ALL ".join(
        raw_buckets(width_ms, ids_sql, f"_{index}") if source is None
        else _rollup_buckets(source, width_ms, ids_sql, f"_{index}")
        for index, source in enumerate(sources))
    if named:
        return bucket_points(points, limited)
    columns = ", ".join(f"points.{name}" for name in BUCKET_COLUMNS)
    return f"SELECT {columns} FROM ({points}) AS points ORDER BY points.ts_ms{limit_sql(limited)}"


def _rollup_buckets(level: str, width_ms: int, ids_sql: str | None, stretch: str) -> str:
    """BUCKET_COLUMNS per GPU and bucket of whole rollup periods of `level`."""
    if width_ms % MINUTE_MS:
        raise ValueError(f"rollup buckets must be whole minutes, not {width_ms} ms")
    if level not in LEVELS:
        raise ValueError(f"no rollup level {level!r}")
    start = bucket_start(f"{level}.bucket_ts", width_ms)
    readings = ", ".join(
        f"{weighted_mean_sql(level, reading)} AS {reading}_avg, "
        f"max({level}.{reading}_max) AS {reading}_max"
        for reading in READINGS)
    return (
        f"SELECT {level}.gpu_id AS gpu_id, {start} AS ts_ms, "
        f"sum({level}.samples) AS samples, {readings} FROM {level} "
        f"WHERE {time_range_sql(f'{level}.bucket_ts', f'{level}.gpu_id', ids_sql, stretch)} "
        f"GROUP BY {level}.gpu_id, {start}"
    )


def weighted_mean_sql(table: str, reading: str) -> str:
    """The mean of rollup rows' means of `reading`, each weighted by the samples that had the
    reading (a minute from before migration 0013: its sample count), as db.retention's
    weighted_mean; NULL where no row has a mean.

    Both operands are cast to FLOAT (double precision on both backends): the division is
    between doubles, and the weights, integers far below 2**53, convert exactly.
    """
    average = f"{table}.{reading}_avg"
    weight = (f"CASE WHEN ({average} IS NULL) THEN NULL "
              f"ELSE coalesce({table}.{reading}_samples, {table}.samples) END")
    return f"CAST(sum({average} * {weight}) AS FLOAT) / CAST(nullif(sum({weight}), 0) AS FLOAT)"
