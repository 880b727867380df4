"""Unmanaged use as stored: per GPU, the processes fleet did not start (written by the leader's
housekeeping when they change, read by `fleet allocations`).

Reading is plain SQL through a db.sql reader, so `fleet allocations` on an SQLite file loads no
SQLAlchemy; writing (the monitor's, which has it loaded) imports SQLAlchemy when it runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from db.rows import UnmanagedGpu
from db.sql import SqlReader

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def store_unmanaged(session: Session, processes_by_gpu: Mapping[tuple[str, int],
                                                    Sequence[Mapping[str, Any]]]
                    ) -> set[tuple[str, int]]:
    """Replace each GPU (host, gpu_idx)'s stored unmanaged processes (none: NULL), with one
    lookup and one UPDATE statement; returns the GPUs written (not those the database does not
    know yet)."""
    from sqlalchemy import select, update

    from db.models import Gpu, Host

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


def unmanaged_gpus(reader: SqlReader) -> list[UnmanagedGpu]:
    """Every GPU with stored unmanaged processes, by host name and index."""
    rows = reader.rows("SELECT hosts.name, gpus.idx, gpus.uuid, gpus.unmanaged_json "
                       "FROM gpus JOIN hosts ON hosts.id = gpus.host_id "
                       "WHERE gpus.unmanaged_json IS NOT NULL ORDER BY hosts.name, gpus.idx")
    return [UnmanagedGpu(host, idx, uuid, tuple(json.loads(data or "[]")))
            for host, idx, uuid, data in rows]
