"""Allocations joined with their GPU, host and task, GPU ids and drain flags looked up by host
and index, and whether a reservation is due to expire.

Plain SQL through a db.sql reader, so `fleet allocations` on an SQLite file loads no
SQLAlchemy; claims and releases pass `SessionReader(session)` to read in their transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from db.rows import AllocationDetail
from db.sql import SqlReader, chunks, in_list

_ALLOCATION_SELECT = """
SELECT allocations.id, allocations.gpu_id, hosts.name, gpus.idx, gpus.uuid, allocations.kind,
       allocations.owner, allocations.task_id, tasks.name, tasks.state, allocations.note,
       allocations.created_at, allocations.expires_at, allocations.released_at,
       allocations.release_reason, allocations.idle_since
FROM allocations JOIN gpus ON gpus.id = allocations.gpu_id
JOIN hosts ON hosts.id = gpus.host_id
LEFT OUTER JOIN tasks ON tasks.id = allocations.task_id
"""


def allocation_details(
    reader: SqlReader,
    *,
    active_only: bool = True,
    allocation_ids: Sequence[int] | None = None,
    owner: str | None = None,
    kind: str | None = None,
) -> list[AllocationDetail]:
    """Allocations (active ones by default; or these ids; of owner/kind), oldest first."""
    terms: list[str] = []
    parameters: dict[str, Any] = {"owner": owner, "kind": kind}
    if active_only:
        terms.append("allocations.released_at IS NULL")
    if owner is not None:
        terms.append("allocations.owner = :owner")
    if kind is not None:
        terms.append("allocations.kind = :kind")
    if allocation_ids is None:
        return _details(reader, terms, parameters)
    found: list[AllocationDetail] = []
    for some_ids in chunks(list(dict.fromkeys(allocation_ids))):
        placeholders, bound = in_list("allocation", some_ids)
        found += _details(reader, [*terms, f"allocations.id IN ({placeholders})"],
                          {**parameters, **bound})
    return sorted(found, key=lambda row: row.id)


def gpu_ids_by_index(reader: SqlReader, host: str, indices: Sequence[int]) -> dict[int, int]:
    """index → GPU id for those `indices` of host `host` that the database knows."""
    found: dict[int, int] = {}
    for some_indices in chunks(list(dict.fromkeys(indices))):
        placeholders, parameters = in_list("idx", some_indices)
        found.update((idx, gpu_id) for idx, gpu_id in reader.rows(
            "SELECT gpus.idx, gpus.id FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
            f"WHERE hosts.name = :host AND gpus.idx IN ({placeholders})",
            {**parameters, "host": host}))
    return found


def drains_by_index(reader: SqlReader, host: str, indices: Sequence[int]
                    ) -> dict[int, tuple[str, str | None]]:
    """index → (what is drained: "host" or "GPU", its reason) for those `indices` of host `host`
    that are drained now (the host's drain first); the others are left out."""
    found: dict[int, tuple[str, str | None]] = {}
    for some_indices in chunks(list(dict.fromkeys(indices))):
        placeholders, parameters = in_list("idx", some_indices)
        for idx, host_drained, host_reason, gpu_reason in reader.rows(
                "SELECT gpus.idx, hosts.drained, hosts.drain_reason, gpus.drain_reason "
                "FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
                f"WHERE hosts.name = :host AND gpus.idx IN ({placeholders}) "
                "AND (hosts.drained = TRUE OR gpus.drained = TRUE)",
                {**parameters, "host": host}):
            found[idx] = ("host", host_reason) if host_drained else ("GPU", gpu_reason)
    return found


def reservations_due(reader: SqlReader, now: int) -> bool:
    """Whether an active allocation's expires_at has passed by `now` (one to expire)."""
    return reader.first(
        "SELECT 1 FROM allocations WHERE released_at IS NULL AND expires_at IS NOT NULL "
        "AND expires_at <= :now LIMIT 1", {"now": now}) is not None


def _details(reader: SqlReader, terms: list[str], parameters: dict[str, Any]
             ) -> list[AllocationDetail]:
    where = f" WHERE {' AND '.join(terms)}" if terms else ""
    return [
        AllocationDetail(
            id=allocation_id, gpu_id=gpu_id, host=host, gpu_idx=idx, uuid=uuid, kind=kind,
            owner=owner, task_id=task_id, task_name=task_name, task_state=task_state,
            note=note, created_at=created_at, expires_at=expires_at, released_at=released_at,
            release_reason=release_reason, idle_since=idle_since,
        )
        for (allocation_id, gpu_id, host, idx, uuid, kind, owner, task_id, task_name, task_state,
             note, created_at, expires_at, released_at, release_reason, idle_since)
        in reader.rows(f"{_ALLOCATION_SELECT}{where} ORDER BY allocations.id", parameters)
    ]
