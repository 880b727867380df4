"""Allocations joined with their GPU, host and task, and GPU ids looked up by host and index."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Allocation, Gpu, Host, Task
from db.rows import AllocationDetail


def allocation_details(
    session: Session,
    *,
    active_only: bool = True,
    allocation_ids: Sequence[int] | None = None,
    owner: str | None = None,
    kind: str | None = None,
) -> list[AllocationDetail]:
    """Allocations (active ones by default; or these ids; of owner/kind), oldest first."""
    query = (
        select(Allocation, Gpu.idx, Gpu.uuid, Host.name, Task.name, Task.state)
        .join(Gpu, Gpu.id == Allocation.gpu_id)
        .join(Host, Host.id == Gpu.host_id)
        .outerjoin(Task, Task.id == Allocation.task_id)
        .order_by(Allocation.id)
    )
    if active_only:
        query = query.where(Allocation.released_at.is_(None))
    if allocation_ids is not None:
        query = query.where(Allocation.id.in_(list(allocation_ids)))
    if owner is not None:
        query = query.where(Allocation.owner == owner)
    if kind is not None:
        query = query.where(Allocation.kind == kind)
    return [
        AllocationDetail(
            id=row.id, gpu_id=row.gpu_id, host=host, gpu_idx=idx, uuid=uuid, kind=row.kind,
            owner=row.owner, task_id=row.task_id, task_name=task_name, task_state=task_state,
            note=row.note, created_at=row.created_at, expires_at=row.expires_at,
            released_at=row.released_at, release_reason=row.release_reason,
            idle_since=row.idle_since,
        )
        for row, idx, uuid, host, task_name, task_state in session.execute(query)
    ]


def gpu_ids_by_index(session: Session, host: str, indices: Sequence[int]) -> dict[int, int]:
    """index → GPU id for those `indices` of host `host` that the database knows."""
    query = (
        select(Gpu.idx, Gpu.id)
        .join(Host, Host.id == Gpu.host_id)
        .where(Host.name == host, Gpu.idx.in_(list(indices)))
    )
    return {idx: gpu_id for idx, gpu_id in session.execute(query)}

