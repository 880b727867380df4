"""Unmanaged use as stored: per GPU, the processes fleet did not start (written by the leader's
housekeeping when they change, read by `fleet allocations`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.models import Gpu, Host
from db.rows import UnmanagedGpu


def store_unmanaged(session: Session, processes_by_gpu: Mapping[tuple[str, int],
                                                    Sequence[Mapping[str, Any]]]
                    ) -> set[tuple[str, int]]:
    """Replace each GPU (host, gpu_idx)'s stored unmanaged processes (none: NULL), with one
    lookup and one UPDATE statement; returns the GPUs written (not those the database does not
    know yet)."""
    if not processes_by_gpu:
        return set()
    hosts = sorted({host for host, _ in processes_by_gpu})
    ids = {(host, idx): gpu_id for gpu_id, host, idx in session.execute(
        select(Gpu.id, Host.name, Gpu.idx).join(Host, Host.id == Gpu.host_id)
        .where(Host.name.in_(hosts)))}
    known = [key for key in processes_by_gpu if key in ids]
    if known:
        session.execute(update(Gpu), [  # an UPDATE by primary key, executed for every row
            {"id": ids[key], "unmanaged_json": json.dumps(list(processes_by_gpu[key]),
                                                          sort_keys=True)
             if processes_by_gpu[key] else None} for key in known])
    return set(known)


def unmanaged_gpus(session: Session) -> list[UnmanagedGpu]:
    """Every GPU with stored unmanaged processes, by host name and index."""
    rows = session.execute(select(Host.name, Gpu.idx, Gpu.uuid, Gpu.unmanaged_json)
                           .join(Host, Host.id == Gpu.host_id)
                           .where(Gpu.unmanaged_json.is_not(None))
                           .order_by(Host.name, Gpu.idx))
    return [UnmanagedGpu(host, idx, uuid, tuple(json.loads(data or "[]")))
            for host, idx, uuid, data in rows]
