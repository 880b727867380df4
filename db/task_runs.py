"""Queries for running tasks: host-contact times, peak GPU memory during a task, and what
orders the queue (the queued tasks, their owners' recent holdings)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import GpuSample, Task
from db.sql import SessionReader, SqlReader, chunks, in_list


def mark_checked(session: Session, task_id: int, now: int) -> None:
    """Record that the task's host answered a status check at `now` (epoch seconds)."""
    session.execute(update(Task).where(Task.id == task_id).values(checked_at=now))


def peak_memory_used(
    session: Session, gpu_ids: Sequence[int], since: int, until: int
) -> int | None:
    """Highest memory_used_bytes sampled on any of `gpu_ids` between two epoch seconds."""
    if not gpu_ids:
        return None
    query = select(func.max(GpuSample.memory_used_bytes)).where(
        GpuSample.gpu_id.in_(list(gpu_ids)),
        GpuSample.ts >= since * 1000,
        GpuSample.ts <= until * 1000 + 999,
    )
    value = session.scalar(query)
    return int(value) if value is not None else None


@dataclass(frozen=True)
class QueuedTask:
    """A task waiting in the queue: what orders it (priority, owner, submission) and its
    waiter's last heartbeat."""

    id: int
    owner: str
    priority: int
    submitted_at: int
    checked_at: int | None


def queued_tasks(session: Session) -> list[QueuedTask]:
    """Every task in the queue, by id: queued, or placing (claiming its GPUs right now; it goes
    back to queued if it loses the race)."""
    rows = session.execute(select(Task.id, Task.owner, Task.priority, Task.submitted_at,
                                  Task.checked_at).where(Task.state.in_(("queued", "placing")))
                           .order_by(Task.id))
    return [QueuedTask(*row) for row in rows]


def task_sessions(reader: SqlReader) -> dict[int, int]:
    """Running tasks' session ids on their hosts (task id → remote_pid, its wrapper's pid).

    Plain SQL: the monitor's housekeeping reads this every pass."""
    rows = reader.rows("SELECT id, remote_pid FROM tasks WHERE state IN ('starting', 'running') "
                       "AND remote_pid IS NOT NULL")
    return {int(task_id): int(pid) for task_id, pid in rows}


def queued_count(session: Session, owner: str) -> int:
    """How many of `owner`'s tasks wait in the queue."""
    return int(session.scalar(select(func.count()).select_from(Task).where(
        Task.owner == owner, Task.state == "queued")) or 0)


def held_since(session: Session, owners: Collection[str], since_s: int
               ) -> list[tuple[str, int, int | None]]:
    """(owner, created_at, held_until) of the owners' allocations still held after since_s.

    `held_until` is the view allocation_spans' (what `fleet usage` reads): the earliest of the
    release, the expiry and the task's end, None while none is known; it may lie in the
    future (a reservation that has not expired yet)."""
    if not owners:
        return []
    reader = SessionReader(session)
    found: list[tuple[str, int, int | None]] = []
    for some_owners in chunks(sorted(owners)):
        placeholders, parameters = in_list("owner", some_owners)
        found += [(owner, int(created), None if held is None else int(held))
                  for owner, created, held in reader.rows(
                      "SELECT owner, created_at, held_until FROM allocation_spans "
                      f"WHERE owner IN ({placeholders}) "
                      "AND (held_until IS NULL OR held_until > :since_s)",
                      {**parameters, "since_s": since_s})]
    return found
