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

from sqlalchemy import (
    BigInteger,
    Select,
    func,
    literal_column,
    select,
    union_all,
)
from sqlalchemy.orm import Session

from db.history import (
    bucket_points,
    gpu_filter,
    gpu_filter_terms,
    gpu_history,
    history_points,
    limited_by,
    matching_gpu_ids,
    raw_buckets,
    time_range,
)
from db.models import (
    Gpu,
    GpuRollupColumns,
    GpuSample,
    GpuSampleFiveMinutes,
    GpuSampleMinute,
    Host,
)
from db.retention import weighted_mean
from db.rollup_periods import FIVE_MINUTES_MS, MINUTE_MS
from db.types import GpuHistoryPoint

# The rollup levels by table name; a stretch of buckets is read from one, or from raw (None).
LEVELS: dict[str, type[GpuRollupColumns]] = {
    "gpu_samples_1m": GpuSampleMinute, "gpu_samples_5m": GpuSampleFiveMinutes}
Source = str | None


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
    """db.history.gpu_history's points, with every rolled-up bucket read from the rollups.

    Only for `bucket_s` a whole number of minutes; raw (unbucketed) queries, other bucket
    sizes and databases without rollups go to gpu_history unchanged. Samples stored after
    their minute was rolled up (later than the retention pass's lag) are not in the rollups.
    """
    arguments: dict[str, Any] = {"host": host, "gpu": gpu, "bucket_s": bucket_s}
    if bucket_s is None or bucket_s <= 0 or bucket_s % 60 != 0:
        return gpu_history(session, since_ms=since_ms, until_ms=until_ms, limit=limit,
                           **arguments)
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    shape, gpu_parameters = gpu_filter(host, gpu)
    row = session.connection().execute(_watermarks_query(*shape), gpu_parameters).one()
    oldest_period, newest_period, newest_minute, oldest_raw = row[:4]
    periods = None if newest_period is None else (int(oldest_period), int(newest_period))
    gpu_ids: list[int] | None = None
    names: tuple[str, int, str | None] | None = None  # of the one GPU the filter names
    if any(shape):
        count, first_id = row[4:6]
        if count == 1:
            gpu_ids, names = [int(first_id)], (row[6], int(row[7]), row[8])
        else:
            gpu_ids = [] if not count else matching_gpu_ids(session, host=host, gpu=gpu)
    if gpu_ids is not None and not gpu_ids:
        return []
    stretches = [(start, end, source) for start, end, source in _stretches(
        since_ms, until_ms, bucket_s * 1000, periods, newest_minute, oldest_raw)
        if start < end]
    if not stretches:
        return []
    query = _stretches_query(tuple(source for _, _, source in stretches), bucket_s * 1000,
                             gpu_ids is not None, limit is not None, names is None)
    parameters: dict[str, Any] = {"gpu_ids": gpu_ids, "limit": limit}
    for index, (start, end, _) in enumerate(stretches):
        parameters[f"since_ms_{index}"] = start
        parameters[f"until_ms_{index}"] = end
    rows: Sequence[Sequence[Any]] = session.connection().execute(query, parameters).all()
    if names is not None:
        rows = [(*names, *bucket) for bucket in rows]
    return history_points(rows)


@lru_cache(maxsize=8)
def _watermarks_query(by_host: bool, by_gpu: bool, by_index: bool) -> Select[Any]:
    """The oldest and newest 5-minute period, the newest minute and the oldest raw sample;
    with a GPU filter,
    also how many GPUs it names and, for one, its id, host name, index and UUID: one round
    trip before the history's own, which then needs neither the names nor a join."""
    columns: list[Any] = [
        select(func.min(GpuSampleFiveMinutes.bucket_ts)).scalar_subquery(),
        select(func.max(GpuSampleFiveMinutes.bucket_ts)).scalar_subquery(),
        select(func.max(GpuSampleMinute.bucket_ts)).scalar_subquery(),
        select(func.min(GpuSample.ts)).scalar_subquery()]
    if not (by_host or by_gpu):
        return select(*columns)
    named = (select(func.count(Gpu.id).label("gpus"), func.min(Gpu.id).label("first_id"),
                    func.min(Host.name).label("host"), func.min(Gpu.idx).label("idx"),
                    func.min(Gpu.uuid).label("uuid"))
             .join(Host, Host.id == Gpu.host_id)
             .where(*gpu_filter_terms(by_host, by_gpu, by_index)).subquery("named"))
    return select(*columns, *named.c)


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
def _stretches_query(sources: tuple[Source, ...], width_ms: int, filtered: bool,
                     limited: bool, named: bool) -> Select[Any]:
    """One statement for all the stretches: their buckets (disjoint, in time order) unioned,
    then (`named`) named, ordered and limited as one query over the raw samples would be, or
    of one GPU, ordered by time and limited. Kept per shape, its ranges bound at execution
    as since_ms_N and until_ms_N."""
    parts = [raw_buckets(width_ms, filtered, f"_{index}") if source is None
             else _rollup_buckets(source, width_ms, filtered, f"_{index}")
             for index, source in enumerate(sources)]
    points = (parts[0] if len(parts) == 1 else union_all(*parts)).subquery("points")
    if named:
        return bucket_points(points, limited)
    return limited_by(select(*points.c).order_by(points.c.ts_ms), limited)


def _rollup_buckets(level: str, width_ms: int, filtered: bool, stretch: str) -> Select[Any]:
    """(gpu_id, ts_ms, samples, avg/max...) per GPU and bucket of whole rollup periods of
    `level` (width inlined so the GROUP BY text matches)."""
    if width_ms % MINUTE_MS:
        raise ValueError(f"rollup buckets must be whole minutes, not {width_ms} ms")
    rollup = LEVELS[level]
    width = literal_column(str(int(width_ms)), BigInteger)
    bucket_start = (rollup.bucket_ts // width) * width
    return (
        select(
            rollup.gpu_id.label("gpu_id"),
            bucket_start.label("ts_ms"),
            func.sum(rollup.samples).label("samples"),
            weighted_mean(rollup, "util").label("util_avg"),
            func.max(rollup.util_max).label("util_max"),
            weighted_mean(rollup, "mem_used").label("mem_used_avg"),
            func.max(rollup.mem_used_max).label("mem_used_max"),
            weighted_mean(rollup, "temp").label("temp_avg"),
            func.max(rollup.temp_max).label("temp_max"),
            weighted_mean(rollup, "power").label("power_avg"),
            func.max(rollup.power_max).label("power_max"),
        )
        .where(*time_range(rollup.bucket_ts, rollup.gpu_id, filtered, stretch))
        .group_by(rollup.gpu_id, bucket_start)
    )
