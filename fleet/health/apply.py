"""Writing health changes to the database (states and event rows) and reading tracker seeds back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.events import add_event
from db.gpus import set_gpu_state
from db.hosts import update_host_state
from db.models import Gpu, Host
from db.types import GpuState, HostState
from fleet.health.rules import GpuSeed, HealthChange, HostSeed


@dataclass(frozen=True)
class AppliedChange:
    """A change as stored: its event row id, and the hook payload to submit."""

    change: HealthChange
    event_id: int
    event: dict[str, object]


def apply_health_changes(session: Session, changes: Sequence[HealthChange],
                         now: float) -> list[AppliedChange]:
    """Write each change's state (GPU or host) and one event row, inside `session` (not committed).

    GPU and host rows are looked up by host name and GPU index; a change naming a host or GPU
    the database does not know is still recorded as an event (without ids), with
    data["unrecorded_state"] set, rather than lost.
    """
    if not changes:
        return []
    names = sorted({change.host for change in changes})
    host_ids = dict(session.execute(select(Host.name, Host.id).where(Host.name.in_(names))).all())
    gpu_ids = {
        (host_id, idx): gpu_id
        for gpu_id, host_id, idx in session.execute(
            select(Gpu.id, Gpu.host_id, Gpu.idx).where(Gpu.host_id.in_(list(host_ids.values())))
        )
    }
    ts = int(now)
    applied: list[AppliedChange] = []
    for change in changes:
        host_id = host_ids.get(change.host)
        gpu_id = None
        if host_id is not None and change.gpu_index is not None:
            gpu_id = gpu_ids.get((host_id, change.gpu_index))
        data = dict(change.data)
        target_missing = host_id is None or (change.gpu_index is not None and gpu_id is None)
        if change.new_state is not None and target_missing:
            data["unrecorded_state"] = True
        elif change.sets_gpu_state and gpu_id is not None:
            set_gpu_state(session, gpu_id, cast(GpuState, change.new_state))
        elif change.sets_host_state and host_id is not None:
            reason = _host_reason(change)
            update_host_state(session, host_id, cast(HostState, change.new_state), reason, ts)
        safe_data = json.loads(json.dumps(data, default=str))
        event_id = add_event(session, ts=ts, kind=change.kind, severity=change.severity,
                             message=change.message, host_id=host_id, gpu_id=gpu_id,
                             data=safe_data)
        applied.append(AppliedChange(change, event_id, change.to_event(now, event_id)))
    return applied


def _host_reason(change: HealthChange) -> str | None:
    reason = change.data.get("reason")
    last_state = change.data.get("last_state")
    if change.new_state == "down" and last_state is not None:
        return f"{last_state}: {reason}" if reason else str(last_state)
    return None


def load_health_seeds(session: Session) -> list[HostSeed]:
    """Every stored host's state, GPU count, driver and GPUs, to seed a HealthTracker."""
    gpus_by_host: dict[int, list[GpuSeed]] = {}
    for gpu in session.scalars(select(Gpu).order_by(Gpu.host_id, Gpu.idx)):
        gpus_by_host.setdefault(gpu.host_id, []).append(
            GpuSeed(index=gpu.idx, state=gpu.state, name=gpu.name, uuid=gpu.uuid)
        )
    return [
        HostSeed(host=host.name, state=host.state, gpu_count=host.gpu_count,
                 driver_version=host.driver_version, gpus=tuple(gpus_by_host.get(host.id, ())))
        for host in session.scalars(select(Host).order_by(Host.name))
    ]
