"""What `fleet usage` is computed from: GPU holdings within a window, how busy their GPUs were
(per minute, from the rollups and the raw samples not rolled up yet), and the tasks submitted.

Times in and out are epoch seconds; samples and rollups are keyed by epoch milliseconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import Allocation, Gpu, GpuSample, GpuSampleMinute, Host, Task
from db.retention import rollup_watermark_ms

MINUTE_MS = 60_000


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


def holdings(session: Session, since_s: float, until_s: float) -> list[Holding]:
    """Every allocation overlapping [since_s, until_s), cut to it (an active one ends now)."""
    end = func.coalesce(Allocation.released_at, int(until_s))
    rows = session.execute(
        select(Allocation.owner, Allocation.kind, Allocation.task_id, Allocation.gpu_id,
               Host.name, Gpu.name, Allocation.created_at, end)
        .join(Gpu, Gpu.id == Allocation.gpu_id).join(Host, Host.id == Gpu.host_id)
        .where(Allocation.created_at < until_s, end > since_s)
        .order_by(Allocation.id)).all()
    return [Holding(owner, kind, task_id, gpu_id, host, model or "unknown", int(created),
                    max(float(created), since_s), min(float(ended), until_s))
            for owner, kind, task_id, gpu_id, host, model, created, ended in rows]


def minute_utilisation(session: Session, gpu_ids: set[int], since_s: float,
                       until_s: float) -> dict[int, dict[int, float]]:
    """Per GPU, its average utilisation (%) in each minute [start_ms, start_ms + 60 s) of the
    window: rolled-up minutes from gpu_samples_1m, later ones from the raw samples."""
    found: dict[int, dict[int, float]] = defaultdict(dict)
    if not gpu_ids:
        return found
    first_ms = int(since_s * 1000) // MINUTE_MS * MINUTE_MS
    until_ms = int(until_s * 1000)
    watermark = rollup_watermark_ms(session) or first_ms
    for gpu_id, bucket, util in session.execute(
            select(GpuSampleMinute.gpu_id, GpuSampleMinute.bucket_ts, GpuSampleMinute.util_avg)
            .where(GpuSampleMinute.gpu_id.in_(gpu_ids), GpuSampleMinute.bucket_ts >= first_ms,
                   GpuSampleMinute.bucket_ts < min(until_ms, watermark),
                   GpuSampleMinute.util_avg.is_not(None))):
        found[gpu_id][int(bucket)] = float(util or 0.0)
    minute = GpuSample.ts // MINUTE_MS * MINUTE_MS
    for gpu_id, bucket, util in session.execute(
            select(GpuSample.gpu_id, minute, func.avg(GpuSample.utilization_gpu_pct))
            .where(GpuSample.gpu_id.in_(gpu_ids), GpuSample.ts >= max(first_ms, watermark),
                   GpuSample.ts < until_ms, GpuSample.utilization_gpu_pct.is_not(None))
            .group_by(GpuSample.gpu_id, minute)):
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


def submitted_tasks(session: Session, since_s: float, until_s: float) -> list[SubmittedTask]:
    """Tasks submitted within [since_s, until_s)."""
    rows = session.execute(
        select(Task.owner, Host.name, Task.state, Task.timed_out, Task.submitted_at,
               Task.started_at)
        .outerjoin(Host, Host.id == Task.host_id)
        .where(Task.submitted_at >= since_s, Task.submitted_at < until_s)
        .order_by(Task.id)).all()
    return [SubmittedTask(owner, host, state, bool(timed_out),
                          None if started is None else float(started - submitted))
            for owner, host, state, timed_out, submitted, started in rows]
