"""What `fleet usage` is computed from: GPU holdings within a window, how busy their GPUs were
(per minute, from the rollups and the raw samples not rolled up yet), and the tasks submitted.

Plain SQL through a db.sql reader (no SQLAlchemy on an SQLite file). Times in and out are
epoch seconds; samples and rollups are keyed by epoch milliseconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from db.rollup_periods import MINUTE_MS, minute_watermark_ms
from db.sql import SqlReader, bucket_start, chunks, in_list


@dataclass(frozen=True)
class Holding:
    """One allocation, cut to the window: who held which GPU, from when to when."""

    owner: str
    kind: str  # "task" or "reservation"
    task_id: int | None
    gpu_id: int
    host: str
    gpu_model: str
    created_s: int  # when the allocation was made (GPUs reserved together share it)
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class SubmittedTask:
    """A task submitted within the window: whose, where it ran, how it ended, how long it waited."""

    owner: str
    host: str | None
    state: str
    timed_out: bool
    wait_s: float | None  # submitted → started (None: it never started)


def holdings(reader: SqlReader, since_s: float, until_s: float) -> list[Holding]:
    """Every allocation overlapping [since_s, until_s), cut to it (an active one ends now)."""
    rows = reader.rows(
        "SELECT allocations.owner, allocations.kind, allocations.task_id, allocations.gpu_id, "
        "hosts.name, gpus.name, allocations.created_at, "
        "coalesce(allocations.released_at, :until_whole) "
        "FROM allocations JOIN gpus ON gpus.id = allocations.gpu_id "
        "JOIN hosts ON hosts.id = gpus.host_id "
        "WHERE allocations.created_at < :until_s "
        "AND coalesce(allocations.released_at, :until_whole) > :since_s "
        "ORDER BY allocations.id",
        {"until_whole": int(until_s), "until_s": until_s, "since_s": since_s})
    return [Holding(owner, kind, task_id, gpu_id, host, model or "unknown", int(created),
                    max(float(created), since_s), min(float(ended), until_s))
            for owner, kind, task_id, gpu_id, host, model, created, ended in rows]


def minute_utilisation(reader: SqlReader, gpu_ids: set[int], since_s: float,
                       until_s: float) -> dict[int, dict[int, float]]:
    """Per GPU, its average utilisation (%) in each minute [start_ms, start_ms + 60 s) of the
    window: rolled-up minutes from gpu_samples_1m, later ones from the raw samples."""
    found: dict[int, dict[int, float]] = defaultdict(dict)
    if not gpu_ids:
        return found
    first_ms = int(since_s * 1000) // MINUTE_MS * MINUTE_MS
    until_ms = int(until_s * 1000)
    watermark = minute_watermark_ms(reader) or first_ms
    for some_ids in chunks(sorted(gpu_ids)):
        placeholders, parameters = in_list("gpu", some_ids)
        for gpu_id, bucket, util in reader.rows(
                "SELECT gpu_id, bucket_ts, util_avg FROM gpu_samples_1m "
                f"WHERE gpu_id IN ({placeholders}) AND bucket_ts >= :first_ms "
                "AND bucket_ts < :rolled_until AND util_avg IS NOT NULL",
                {**parameters, "first_ms": first_ms, "rolled_until": min(until_ms, watermark)}):
            found[gpu_id][int(bucket)] = float(util or 0.0)
        minute = bucket_start("ts", MINUTE_MS)
        for gpu_id, bucket, util in reader.rows(
                f"SELECT gpu_id, {minute}, avg(utilization_gpu_pct) "
                f"FROM gpu_samples WHERE gpu_id IN ({placeholders}) AND ts >= :raw_from "
                "AND ts < :until_ms AND utilization_gpu_pct IS NOT NULL "
                f"GROUP BY gpu_id, {minute}",
                {**parameters, "raw_from": max(first_ms, watermark), "until_ms": until_ms}):
            found[gpu_id][int(bucket)] = float(util)
    return found


def busy_seconds(holding: Holding, minutes: dict[int, float]) -> float:
    """The holding's GPU-seconds weighted by its GPU's utilisation, minute by minute; a minute
    without samples counts as not busy."""
    total = 0.0
    start_ms, end_ms = holding.start_s * 1000, holding.end_s * 1000
    bucket = int(start_ms) // MINUTE_MS * MINUTE_MS
    while bucket < end_ms:
        overlap_ms = min(end_ms, bucket + MINUTE_MS) - max(start_ms, bucket)
        total += minutes.get(bucket, 0.0) / 100 * overlap_ms / 1000
        bucket += MINUTE_MS
    return total


def submitted_tasks(reader: SqlReader, since_s: float, until_s: float) -> list[SubmittedTask]:
    """Tasks submitted within [since_s, until_s)."""
    rows = reader.rows(
        "SELECT tasks.owner, hosts.name, tasks.state, tasks.timed_out, tasks.submitted_at, "
        "tasks.started_at FROM tasks LEFT OUTER JOIN hosts ON hosts.id = tasks.host_id "
        "WHERE tasks.submitted_at >= :since_s AND tasks.submitted_at < :until_s "
        "ORDER BY tasks.id", {"since_s": since_s, "until_s": until_s})
    return [SubmittedTask(owner, host, state, bool(timed_out),
                          None if started is None else float(started - submitted))
            for owner, host, state, timed_out, submitted, started in rows]
