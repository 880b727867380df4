"""GPU allocations: claiming GPUs atomically (the database refuses double-booking) and releasing."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import case, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.errors import AllocationConflict, OverLimit, TaskNotActive
from db.models import Allocation, Task
from db.types import ACTIVE_TASK_STATES, AllocationKind, AllocationRow


def claim_gpus(
    session: Session,
    gpu_ids: Sequence[int],
    *,
    kind: AllocationKind,
    owner: str,
    now: int,
    task_id: int | None = None,
    note: str | None = None,
    expires_at: int | None = None,
    max_held: int | None = None,
) -> list[int]:
    """Create one active allocation per GPU, all or none; returns the allocation ids.

    With `max_held`, OverLimit when the owner would then hold more active allocations than
    that (counted under a per-owner lock on PostgreSQL, under SQLite's write lock there).
    With `task_id`, TaskNotActive when that task has already ended (lock_active_task).

    Raises AllocationConflict naming the GPUs already allocated (also when another process
    claimed one between our check and our insert: the partial unique index refuses it). After
    that error the caller's transaction must be rolled back (Database.session() does).
    """
    if not gpu_ids:
        return []
    if task_id is not None and not lock_active_task(session, task_id):
        raise TaskNotActive(task_id)
    if max_held is not None:
        lock_owner(session, owner)
        held = held_by(session, owner)
        if held + len(gpu_ids) > max_held:
            raise OverLimit(held, max_held)
    taken = active_gpu_ids(session, gpu_ids)
    if taken:
        raise AllocationConflict(sorted(taken), f"GPU ids {sorted(taken)} are already allocated")
    rows = [
        {
            "gpu_id": gpu_id,
            "task_id": task_id,
            "kind": kind,
            "owner": owner,
            "note": note,
            "created_at": now,
            "expires_at": expires_at,
        }
        for gpu_id in gpu_ids
    ]
    try:
        result = session.execute(insert(Allocation).returning(Allocation.id), rows)
        return list(result.scalars())
    except IntegrityError as exc:
        raise AllocationConflict(
            gpu_ids, f"GPU ids {sorted(gpu_ids)} were claimed concurrently by another allocation"
        ) from exc


def lock_active_task(session: Session, task_id: int) -> bool:
    """Hold the task's row until this transaction ends, if the task is still active; False
    when it has ended. A no-op UPDATE: the row lock on PostgreSQL, the write lock on SQLite.
    An end that races the claim (`fleet cancel` while the task is placed) then either comes
    first, and the claim sees it, or waits and releases what the claim made."""
    result = session.execute(update(Task).where(Task.id == task_id,
                                                Task.state.in_(ACTIVE_TASK_STATES))
                             .values(state=Task.state))
    return int(result.rowcount) > 0  # type: ignore[attr-defined]


# pg_advisory_xact_lock(OWNER_LOCK_CLASS, hashtext(owner)): one owner's limit checks in turn.
OWNER_LOCK_CLASS = 0x666C6F77  # "flow"


def lock_owner(session: Session, owner: str) -> None:
    """Serialise the limit checks of `owner`'s claims until this transaction ends (PostgreSQL;
    SQLite transactions that write are serialised already)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:lock_class, hashtext(:owner))"),
                        {"lock_class": OWNER_LOCK_CLASS, "owner": owner})


# pg_advisory_xact_lock(_shared)(DRAIN_LOCK_CLASS, 0): claims read drain flags under the shared
# lock, drains write them under the exclusive one, so each claim sees every drain committed
# before it and no drain commits while a claim that read the flags is open. One lock, apart from
# the rows the monitor's flushes update: it cannot deadlock with them.
DRAIN_LOCK_CLASS = 0x64726E  # "drn"


def lock_drains(session: Session, *, exclusive: bool) -> None:
    """Order this transaction's drain reads (a claim: shared) or writes (a drain: exclusive)
    against the others until it ends (PostgreSQL; SQLite serialises writing transactions)."""
    if session.get_bind().dialect.name == "postgresql":
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        session.execute(text(f"SELECT {function}(:lock_class, 0)"),
                        {"lock_class": DRAIN_LOCK_CLASS})


def held_by(session: Session, owner: str) -> int:
    """How many GPUs `owner` holds now (active allocations: tasks and reservations)."""
    return int(session.scalar(select(func.count()).select_from(Allocation).where(
        Allocation.owner == owner, Allocation.released_at.is_(None))) or 0)


def held_by_owners(session: Session, owners: Sequence[str]) -> dict[str, int]:
    """How many GPUs each of `owners` holds now (absent: none)."""
    if not owners:
        return {}
    rows = session.execute(select(Allocation.owner, func.count()).where(
        Allocation.owner.in_(list(owners)), Allocation.released_at.is_(None))
        .group_by(Allocation.owner))
    return {owner: int(count) for owner, count in rows}


def active_gpu_ids(session: Session, gpu_ids: Sequence[int] | None = None) -> set[int]:
    """The GPU ids (of `gpu_ids`, or all) that have an active allocation."""
    query = select(Allocation.gpu_id).where(Allocation.released_at.is_(None))
    if gpu_ids is not None:
        query = query.where(Allocation.gpu_id.in_(list(gpu_ids)))
    return set(session.scalars(query))


def release_allocations(
    session: Session,
    *,
    now: int,
    reason: str,
    allocation_ids: Sequence[int] | None = None,
    task_id: int | None = None,
) -> int:
    """Release the active allocations given by id and/or task; returns how many were released."""
    if allocation_ids is None and task_id is None:
        raise ValueError("release_allocations needs allocation_ids or task_id")
    statement = update(Allocation).where(Allocation.released_at.is_(None))
    if allocation_ids is not None:
        statement = statement.where(Allocation.id.in_(list(allocation_ids)))
    if task_id is not None:
        statement = statement.where(Allocation.task_id == task_id)
    result = session.execute(statement.values(released_at=now, release_reason=reason))
    return int(result.rowcount)  # type: ignore[attr-defined]


def expire_reservations(session: Session, now: int) -> int:
    """Release active allocations whose expires_at has passed; returns how many.

    Each is released at its expiry (never before it was made), not at `now`: a hold that
    expired while nothing was running to release it held its GPU only until then (usage
    counts it so). That keeps a GPU's allocation intervals apart: no other allocation of the
    GPU began while this one was active, and any later one begins after this release.
    """
    released_at = case((Allocation.expires_at < Allocation.created_at, Allocation.created_at),
                       else_=Allocation.expires_at)
    result = session.execute(
        update(Allocation)
        .where(
            Allocation.released_at.is_(None),
            Allocation.expires_at.is_not(None),
            Allocation.expires_at <= now,
        )
        .values(released_at=released_at, release_reason="expired")
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def list_allocations(session: Session, *, active_only: bool = True) -> list[AllocationRow]:
    """Allocations (only active ones by default), oldest first."""
    query = select(Allocation).order_by(Allocation.id)
    if active_only:
        query = query.where(Allocation.released_at.is_(None))
    return [
        AllocationRow(
            id=row.id,
            gpu_id=row.gpu_id,
            task_id=row.task_id,
            kind=row.kind,
            owner=row.owner,
            note=row.note,
            created_at=row.created_at,
            expires_at=row.expires_at,
            released_at=row.released_at,
            release_reason=row.release_reason,
        )
        for row in session.scalars(query)
    ]
