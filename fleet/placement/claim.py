"""Claiming placed GPUs in one database transaction; the unique index refuses double-booking."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from db.allocation_details import allocation_details, drains_by_index, gpu_ids_by_index
from db.allocations import claim_gpus, expire_reservations, lock_drains
from db.engine import Database
from db.errors import AllocationConflict as DbAllocationConflict
from db.errors import OverLimit, TaskNotActive
from db.sql import SessionReader
from db.types import AllocationKind
from fleet.errors import AllocationConflict, DispatchError, GpuDrained, TaskCancelled
from fleet.placement.free import drained_text
from fleet.placement.limits import LimitReached, UserLimits, over_gpu_limit
from fleet.placement.place import PlacementResult

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Claim:
    """GPUs held by one task or reservation: where they are and the allocation ids holding them.

    `gpu_uuids[i]` is the UUID of GPU `gpu_indices[i]` (None if never read). `placement` is the
    placement that chose them and `attempts` how many place-and-claim rounds it took.
    """

    host: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str | None, ...]
    allocation_ids: tuple[int, ...]
    kind: str
    owner: str
    task_id: int | None = None
    note: str | None = None
    created_at: int = 0
    expires_at: int | None = None
    placement: PlacementResult | None = None
    attempts: int = 1

    @property
    def cuda_visible_devices(self) -> str:
        """The CUDA_VISIBLE_DEVICES value: the GPUs' UUIDs (their indices if a UUID is unknown)."""
        if all(uuid for uuid in self.gpu_uuids):
            return ",".join(uuid for uuid in self.gpu_uuids if uuid)
        return ",".join(str(index) for index in self.gpu_indices)


def claim(
    database: Database,
    host: str,
    gpu_indices: Sequence[int],
    *,
    kind: AllocationKind,
    owner: str,
    task_id: int | None = None,
    note: str | None = None,
    expires_at: int | None = None,
    now: int | None = None,
    limits: UserLimits | None = None,
    hold_s: float | None = None,
) -> Claim:
    """Allocate these GPUs of `host`, all or none, in one transaction.

    With `limits`, LimitReached (exit 7) when the owner would hold more GPUs than their
    `max_gpus_per_user` (checked in the same transaction).

    With `hold_s` (instead of `expires_at`) the claim expires that many seconds (rounded up)
    after it is made: a `reserve --for 1m` holds a whole minute, however long placement took.

    Expired reservations are released first (in the same transaction), so an expired hold never
    blocks a claim. Raises fleet.errors.AllocationConflict naming the GPUs another claim holds
    (checked, or refused by the database's unique index when two processes race), GpuDrained
    (an AllocationConflict) when one of the GPUs or the host is drained now, and DispatchError
    when the database does not know one of the GPUs.
    """
    moment = int(now if now is not None else time.time())
    indices = sorted(set(gpu_indices))
    if not indices:
        raise DispatchError(f"nothing to claim on {host}: no GPU indices given")
    ids: dict[int, int] = {}
    try:
        with database.session() as session:
            expire_reservations(session, moment)
            if now is None:
                # The write lock is held from here: a claim that waited for it is timed now,
                # after any release it waited on, so a GPU's allocation intervals never overlap.
                moment = max(moment, int(time.time()))
            if hold_s is not None:
                expires_at = moment + math.ceil(hold_s)
            reader = SessionReader(session)
            ids = gpu_ids_by_index(reader, host, indices)
            unknown = [index for index in indices if index not in ids]
            if unknown:
                raise DispatchError(f"{host} has no GPU {unknown} in the database")
            refuse_drained(session, host, indices)
            gpu_ids = [ids[index] for index in indices]
            allocation_ids = claim_gpus(session, gpu_ids, kind=kind, owner=owner, now=moment,
                                        task_id=task_id, note=note, expires_at=expires_at,
                                        max_held=limits.max_gpus if limits else None)
            details = {row.gpu_id: row for row in
                       allocation_details(reader, allocation_ids=allocation_ids)}
    except DbAllocationConflict as exc:
        taken = sorted(index for index, gpu_id in ids.items() if gpu_id in exc.gpu_ids)
        raise AllocationConflict(f"{host} GPU {taken or indices} already allocated") from exc
    except OverLimit as exc:
        assert limits is not None
        raise LimitReached(over_gpu_limit(limits, exc.held, len(indices)) or str(exc)) from exc
    except TaskNotActive as exc:
        raise ended_elsewhere(exc) from exc
    return Claim(
        host=host,
        gpu_indices=tuple(indices),
        gpu_uuids=tuple(details[gpu_id].uuid for gpu_id in gpu_ids),
        allocation_ids=tuple(details[gpu_id].id for gpu_id in gpu_ids),
        kind=kind,
        owner=owner,
        task_id=task_id,
        note=note,
        created_at=moment,
        expires_at=expires_at,
    )


def ended_elsewhere(exc: TaskNotActive) -> TaskCancelled:
    """The error for a claim whose task was ended (`fleet cancel`) while it was placed."""
    return TaskCancelled(f"task {exc.task_id} was cancelled before it was placed")


def refuse_drained(session: Session, host: str, indices: Sequence[int]) -> None:
    """GpuDrained when one of these GPUs of `host`, or the host, is drained in the claim's own
    transaction: a drain written by another process since placement read its view (a running
    monitor's reaches it only at its next flush) still keeps the work off. On PostgreSQL the
    flags are read under the drain lock (shared): a drain waits for this claim to end."""
    lock_drains(session, exclusive=False)
    drains = drains_by_index(SessionReader(session), host, indices)
    if drains:
        what, reason = drains[min(drains)]
        raise GpuDrained(f"{host} GPU {sorted(drains)}: {drained_text(what, reason)}")


def claim_gang(
    database: Database,
    nodes: Sequence[tuple[str, Sequence[int]]],
    *,
    owner: str,
    task_ids: Callable[[Session], Sequence[int]],
    limits: UserLimits | None = None,
) -> list[Claim]:
    """Allocate the GPUs of every node of a gang, all or none, in one transaction.

    `task_ids(session)` gives each rank's task id in the same transaction (it creates the
    gang's other members there), so a lost race leaves neither allocations nor member rows.
    The owner's GPU limit counts the whole gang. Errors as for `claim` (drains included).
    """
    moment = int(time.time())
    claims: list[Claim] = []
    host = "?"
    ids: dict[int, int] = {}
    try:
        with database.session() as session:
            expire_reservations(session, moment)
            moment = max(moment, int(time.time()))
            reader = SessionReader(session)
            members = list(task_ids(session))
            if len(members) != len(nodes):
                raise DispatchError(f"a gang of {len(nodes)} nodes got {len(members)} task ids")
            for (host, gpu_indices), task_id in zip(nodes, members, strict=True):
                indices = sorted(set(gpu_indices))
                ids = gpu_ids_by_index(reader, host, indices)
                unknown = [index for index in indices if index not in ids]
                if unknown:
                    raise DispatchError(f"{host} has no GPU {unknown} in the database")
                refuse_drained(session, host, indices)
                gpu_ids = [ids[index] for index in indices]
                allocation_ids = claim_gpus(session, gpu_ids, kind="task", owner=owner,
                                            now=moment, task_id=task_id,
                                            max_held=limits.max_gpus if limits else None)
                details = {row.gpu_id: row for row in
                           allocation_details(reader, allocation_ids=allocation_ids)}
                claims.append(Claim(
                    host=host, gpu_indices=tuple(indices),
                    gpu_uuids=tuple(details[gpu_id].uuid for gpu_id in gpu_ids),
                    allocation_ids=tuple(details[gpu_id].id for gpu_id in gpu_ids),
                    kind="task", owner=owner, task_id=task_id, created_at=moment))
    except DbAllocationConflict as exc:
        taken = sorted(index for index, gpu_id in ids.items() if gpu_id in exc.gpu_ids)
        raise AllocationConflict(f"{host} GPU {taken or '?'} already allocated") from exc
    except OverLimit as exc:
        assert limits is not None
        wanted = sum(len(set(indices)) for _host, indices in nodes)
        raise LimitReached(over_gpu_limit(limits, exc.held, wanted) or str(exc)) from exc
    except TaskNotActive as exc:
        raise ended_elsewhere(exc) from exc
    return claims
