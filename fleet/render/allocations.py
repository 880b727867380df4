"""Allocations as plain data for `fleet allocations --json` (no database import)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleet.records import AllocationDetail


def allocation_to_json(row: AllocationDetail) -> dict[str, Any]:
    """One allocation as plain data."""
    return {
        "id": row.id,
        "host": row.host,
        "gpu": row.gpu_idx,
        "uuid": row.uuid,
        "kind": row.kind,
        "owner": row.owner,
        "task_id": row.task_id,
        "task_name": row.task_name,
        "task_state": row.task_state,
        "note": row.note,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "released_at": row.released_at,
        "idle_since": row.idle_since,
        "release_reason": row.release_reason,
        "active": row.active,
    }
