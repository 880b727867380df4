"""Writing health changes and host outcomes to the database, and reading tracker seeds back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from db.events import add_event
from db.gpus import gpu_ids_of_hosts, set_gpu_state
from db.hosts import host_ids_named, host_state, update_host_state
from db.sql import SqlWriter, writer_of
from db.types import GpuState
from fleet.health.changes import HealthChange
from fleet.health.host_state import FAILED_STATES, host_transition, state_reason
from fleet.health.rules import GpuSeed, HostSeed
from fleet.model import HostOutcome, HostState

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class AppliedChange:
    """A change as stored: its event row id, and the hook payload to submit."""

    change: HealthChange
    event_id: int
    event: dict[str, object]


@dataclass(frozen=True)
class RecordedOutcome:
    """A host outcome as stored: the host's state afterwards and the change written, if any."""

    state: HostState
    applied: AppliedChange | None


def record_host_outcome(
    target: Session | SqlWriter,
    host_id: int,
    host: str,
    outcome: HostOutcome,
    reason: str | None,
    *,
    failures: int = 1,
    down_after: int = 1,
    now: float,
) -> RecordedOutcome:
    """Apply fleet.health.host_state's rule to the host's stored state (in `target`'s
    transaction).

    Writes the state when it changes or stays failed (reason and last_probe_at refreshed), and
    the event when there is one; a pending failure writes nothing. The defaults are those of
    `fleet status`; the monitor passes its consecutive failure count and host_down_after.
    Raises LookupError for an unknown host id.
    """
    writer = writer_of(target)
    stored = host_state(writer, host_id)
    transition = host_transition(host, stored, outcome, reason, failures=failures,
                                 down_after=down_after, now=now)
    if transition.pending:
        return RecordedOutcome(transition.state, None)
    ts = int(now)
    if transition.state != stored or transition.state in FAILED_STATES:
        update_host_state(writer, host_id, transition.state, state_reason(outcome, reason), ts)
    change = transition.event
    if change is None:
        return RecordedOutcome(transition.state, None)
    event_id = add_event(writer, ts=ts, kind=change.kind, severity=change.severity,
                         message=change.message, host_id=host_id,
                         data=json.loads(json.dumps(dict(change.data), default=str)))
    return RecordedOutcome(transition.state,
                           AppliedChange(change, event_id, change.to_event(now, event_id)))


def apply_health_changes(target: Session | SqlWriter, changes: Sequence[HealthChange],
                         now: float) -> list[AppliedChange]:
    """Write each change's GPU state and one event row, in `target`'s transaction (not
    committed).

    GPU rows are looked up by host name and GPU index; a change naming a host or GPU the
    database does not know is still recorded as an event (without ids), with
    data["unrecorded_state"] set, rather than lost. Host states are not changes: they go
    through record_host_outcome (a host change here raises ValueError).
    """
    if not changes:
        return []
    if any(change.sets_host_state for change in changes):
        raise ValueError("host states are written by record_host_outcome, not as changes")
    writer = writer_of(target)
    host_ids = host_ids_named(writer, sorted({change.host for change in changes}))
    gpu_ids = gpu_ids_of_hosts(writer, sorted(host_ids.values()))
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
            set_gpu_state(writer, gpu_id, cast(GpuState, change.new_state))
        safe_data = json.loads(json.dumps(data, default=str))
        event_id = add_event(writer, ts=ts, kind=change.kind, severity=change.severity,
                             message=change.message, host_id=host_id, gpu_id=gpu_id,
                             data=safe_data)
        applied.append(AppliedChange(change, event_id, change.to_event(now, event_id)))
    return applied


def load_health_seeds(session: Session) -> list[HostSeed]:
    """Every stored host's state, GPU count, driver and GPUs, to seed a HealthTracker."""
    from sqlalchemy import select

    from db.models import Gpu, Host

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
