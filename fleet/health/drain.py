"""Manual drain and undrain of a host or one GPU (no new work placed), each an event row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from db.allocations import lock_drains
from db.events import add_event
from db.gpus import set_gpu_drained
from db.hosts import set_host_drained
from db.sql import SessionReader
from fleet.targets import resolve_target

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class DrainOutcome:
    """The result of one drain/undrain: what it named, and whether anything changed."""

    host: str
    gpu_index: int | None
    drained: bool
    changed: bool
    reason: str | None
    event_id: int | None

    @property
    def target(self) -> str:
        """"HOST" or "HOST:IDX"."""
        return self.host if self.gpu_index is None else f"{self.host}:{self.gpu_index}"


def set_drain(session: Session, target: str, *, drained: bool, reason: str | None, by: str,
              now: float) -> DrainOutcome:
    """Drain (`drained`) or undrain TARGET: a host name, "HOST:IDX", or a GPU UUID.

    Records a host_drained / host_undrained / gpu_drained / gpu_undrained event when the flag
    or the reason changes. Raises ConfigError naming the known hosts or GPU indices when the
    target is unknown (hosts are known once `fleet status` or the monitor has seen them).
    """
    lock_drains(session, exclusive=True)  # after the claims that read the flags (PostgreSQL)
    host, gpu = resolve_target(SessionReader(session), target, what="drain target")
    ts = int(now)
    if gpu is None:
        unchanged = host.drained == drained and (not drained or host.drain_reason == reason)
        if unchanged:
            return DrainOutcome(host.name, None, drained, False, host.drain_reason, None)
        set_host_drained(session, host.id, drained, reason)
        kind = "host_drained" if drained else "host_undrained"
        message = f"{host.name}: {'drained' if drained else 'undrained'} by {by}"
        gpu_id = None
        gpu_index = None
    else:
        unchanged = gpu.drained == drained and (not drained or gpu.drain_reason == reason)
        if unchanged:
            return DrainOutcome(host.name, gpu.idx, drained, False, gpu.drain_reason, None)
        set_gpu_drained(session, gpu.id, drained, reason)
        kind = "gpu_drained" if drained else "gpu_undrained"
        message = f"{host.name} GPU {gpu.idx}: {'drained' if drained else 'undrained'} by {by}"
        gpu_id = gpu.id
        gpu_index = gpu.idx
    if drained and reason:
        message += f": {reason}"
    event_id = add_event(session, ts=ts, kind=kind, severity="info", message=message,
                         host_id=host.id, gpu_id=gpu_id,
                         data={"by": by, "reason": reason, "drained": drained})
    return DrainOutcome(host.name, gpu_index, drained, True, reason if drained else None,
                        event_id)
