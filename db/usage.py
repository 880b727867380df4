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
    allocation_id: int
    claim_id: int  # the first allocation id of the claim that made it (one `fleet reserve`)
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


def _other_claim(row: str, host_id: str) -> str:
    """Whether allocation `row` (on host `host_id`) was made by another claim than holding s's:
    a claim writes one row per GPU of one host, all with the same kind, owner, time, expiry and
    note, in one INSERT. (COALESCE(x = y, x IS NULL AND y IS NULL): an equality that is true
    of two NULLs and never NULL itself.)"""
    return (f"NOT ({row}.kind = s.kind AND {row}.owner = s.owner "
            f"AND {row}.created_at = s.created_at "
            f"AND COALESCE({row}.expires_at = s.expires_at, "
            f"{row}.expires_at IS NULL AND s.expires_at IS NULL) "
            f"AND COALESCE({row}.note = s.note, {row}.note IS NULL AND s.note IS NULL) "
            f"AND {host_id} = gpus.host_id)")


# The first allocation id of reservation s's claim. A claim's rows have consecutive ids (one
# INSERT), so it begins after the last row before s that another claim made: where the row
# just before s (p) is another claim's, s itself; otherwise found by walking the primary key
# back from s over its own claim. Two claims alike in all of the above, by one owner in one
# second on one host, with no other allocation between them, read as one.
CLAIM_ID_SQL = (
    "CASE WHEN s.kind <> 'reservation' THEN s.allocation_id "
    f"WHEN p.id IS NOT NULL AND {_other_claim('p', 'pg.host_id')} THEN s.allocation_id "
    "ELSE (SELECT MIN(b.id) FROM allocations b WHERE b.id <= s.allocation_id AND b.id > COALESCE("
    "(SELECT c.id FROM allocations c WHERE c.id < s.allocation_id AND "
    f"{_other_claim('c', '(SELECT cg.host_id FROM gpus cg WHERE cg.id = c.gpu_id)')} "
    "ORDER BY c.id DESC LIMIT 1), 0)) END")


def holdings(reader: SqlReader, since_s: float, until_s: float,
             now_s: float | None = None) -> list[Holding]:
    """Every allocation held within [since_s, until_s), cut to it.

    An allocation is held until the view allocation_spans' `held_until` (the earliest of its
    release, its expiry and its task's end: what usage_daily and fair share read too), and one
    still held counts until now_s (default: until_s), never past until_s: a window that ends
    in the future, or lies in it, counts nothing after now.
    """
    end_s = until_s if now_s is None else min(until_s, now_s)
    if end_s <= since_s:
        return []
    rows = reader.rows(
        "SELECT s.allocation_id, s.owner, s.kind, s.task_id, s.gpu_id, hosts.name, gpus.name, "
        "s.created_at, s.held_until, "
        f"{CLAIM_ID_SQL} "
        "FROM allocation_spans s JOIN gpus ON gpus.id = s.gpu_id "
        "JOIN hosts ON hosts.id = gpus.host_id "
        "LEFT OUTER JOIN allocations p ON p.id = s.allocation_id - 1 "
        "LEFT OUTER JOIN gpus pg ON pg.id = p.gpu_id "
        "WHERE s.created_at < :end_s AND (s.held_until IS NULL OR s.held_until > :since_s) "
        "ORDER BY s.allocation_id",
        {"end_s": end_s, "since_s": since_s})
    found = []
    for (allocation_id, owner, kind, task_id, gpu_id, host, model, created, held_until,
         claim_id) in rows:
        start = max(float(created), since_s)
        end = end_s if held_until is None else min(float(held_until), end_s)
        found.append(Holding(owner, kind, task_id, gpu_id, host, model or "unknown",
                             int(allocation_id), int(claim_id), start, max(end, start)))
    return found


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
    """The holding's GPU-seconds weighted by its GPU's utilisation, minute by minute, each
    minute for the part of it held; a minute without samples counts as not busy. The view
    usage_daily (migration 0015) sums the rolled-up minutes the same way, in SQL."""
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
