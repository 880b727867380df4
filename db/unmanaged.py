"""Unmanaged use as stored: per GPU, the processes fleet did not start (written by the leader's
housekeeping when they change, read by `fleet allocations`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.models import Gpu, Host


@dataclass(frozen=True)
class UnmanagedGpu:
    """A GPU with processes fleet did not start: each a mapping of pid, name, uid and user."""

    host: str
    gpu_idx: int
    uuid: str | None
    processes: tuple[Mapping[str, Any], ...]


def store_unmanaged(session: Session, host: str, gpu_idx: int,
                    processes: Sequence[Mapping[str, Any]]) -> bool:
    """Replace GPU (host, gpu_idx)'s stored unmanaged processes (none: NULL); False when the
    database does not know that GPU yet."""
    gpu_id = session.scalar(select(Gpu.id).join(Host, Host.id == Gpu.host_id)
                            .where(Host.name == host, Gpu.idx == gpu_idx))
    if gpu_id is None:
        return False
    value = json.dumps(list(processes), sort_keys=True) if processes else None
    session.execute(update(Gpu).where(Gpu.id == gpu_id).values(unmanaged_json=value))
    return True


def unmanaged_gpus(session: Session) -> list[UnmanagedGpu]:
    """Every GPU with stored unmanaged processes, by host name and index."""
    rows = session.execute(select(Host.name, Gpu.idx, Gpu.uuid, Gpu.unmanaged_json)
                           .join(Host, Host.id == Gpu.host_id)
                           .where(Gpu.unmanaged_json.is_not(None))
                           .order_by(Host.name, Gpu.idx))
    return [UnmanagedGpu(host, idx, uuid, tuple(json.loads(data or "[]")))
            for host, idx, uuid, data in rows]
