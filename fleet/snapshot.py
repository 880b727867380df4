"""The live view of the fleet that the monitor maintains and the CLI/TUI subscribe to."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from fleet.model import HostSpec
from fleet.reports import GpuReport, ProbeReport, ProcessInfo

if TYPE_CHECKING:
    from db.rows import AllocationDetail


@dataclass(frozen=True)
class AllocationInfo:
    """Who holds a GPU: a task (task_id) or an operator reservation."""

    allocation_id: int
    kind: str  # "task" | "reservation"
    owner: str
    task_id: int | None = None
    task_name: str | None = None
    expires_at: int | None = None  # epoch seconds
    note: str | None = None
    idle_since: int | None = None  # epoch seconds: its GPU idle since (fleet.placement.idle)


def allocation_infos(details: Iterable[AllocationDetail]) -> dict[tuple[str, int], AllocationInfo]:
    """(host, GPU index) → holder, for stored allocations: the one row-to-view mapping."""
    return {
        (detail.host, detail.gpu_idx): AllocationInfo(
            allocation_id=detail.id, kind=detail.kind, owner=detail.owner,
            task_id=detail.task_id, task_name=detail.task_name, expires_at=detail.expires_at,
            note=detail.note, idle_since=detail.idle_since)
        for detail in details
    }


class GpuSnapshot(msgspec.Struct, frozen=True):
    """One GPU as last seen: its reading, health state, drain flag and holder.

    A frozen Struct rather than a frozen dataclass: the monitor builds one per GPU per reading,
    and a frozen dataclass's __init__ sets each field through object.__setattr__ (≈10× the
    cost). Change one with msgspec.structs.replace."""

    host: str
    index: int
    reading: GpuReport
    state: str = "ok"  # ok | hot | failed | degraded | lost
    drained: bool = False
    drain_reason: str | None = None
    allocation: AllocationInfo | None = None
    # its processes fleet did not start (fleet.health.unmanaged), as last judged
    unmanaged: tuple[ProcessInfo, ...] = ()

    @property
    def key(self) -> str:
        """Stable identity for tables and selection: "HOST:IDX"."""
        return f"{self.host}:{self.index}"


class HostSnapshot(msgspec.Struct, frozen=True):
    """One host as last seen. `report` is the last good probe, kept while the host is down.
    A frozen Struct, as GpuSnapshot."""

    spec: HostSpec
    state: str  # a fleet.model.HostState word
    reason: str | None = None
    report: ProbeReport | None = None
    last_seen: float | None = None
    drained: bool = False
    drain_reason: str | None = None
    gpus: tuple[GpuSnapshot, ...] = ()


@dataclass(frozen=True)
class FleetSnapshot:
    """Every host at one moment; `changed` names the hosts that differ from the previous one."""

    taken_at: float
    hosts: tuple[HostSnapshot, ...]
    changed: frozenset[str] = field(default_factory=frozenset)

    def host(self, name: str) -> HostSnapshot | None:
        """The snapshot of host `name`, or None."""
        for host in self.hosts:
            if host.spec.name == name:
                return host
        return None
