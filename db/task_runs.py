"""Queries for running tasks: host-contact times, peak GPU memory during a task, queue order."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import GpuSample, Task


def mark_checked(session: Session, task_id: int, now: int) -> None:
    """Record that the task's host answered a status check at `now` (epoch seconds)."""
    session.execute(update(Task).where(Task.id == task_id).values(checked_at=now))


def checked_at(session: Session, task_ids: Sequence[int]) -> dict[int, int | None]:
    """When each task's host last answered a check (None if never)."""
    if not task_ids:
        return {}
    query = select(Task.id, Task.checked_at).where(Task.id.in_(list(task_ids)))
    return {task_id: value for task_id, value in session.execute(query)}


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


def queued_ahead(session: Session, task_id: int) -> list[int]:
    """Ids of queued tasks that come before `task_id` (higher priority, or same and older)."""
    mine = session.execute(
        select(Task.priority, Task.submitted_at).where(Task.id == task_id)
    ).one_or_none()
    if mine is None:
        raise LookupError(f"no task with id {task_id}")
    priority, submitted_at = mine
    query = (
        select(Task.id)
        .where(Task.state == "queued", Task.id != task_id)
        .where(
            (Task.priority > priority)
            | ((Task.priority == priority) & (Task.submitted_at < submitted_at))
            | ((Task.priority == priority) & (Task.submitted_at == submitted_at)
               & (Task.id < task_id))
        )
        .order_by(Task.priority.desc(), Task.submitted_at, Task.id)
    )
    return list(session.scalars(query))
