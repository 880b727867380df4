"""Manual drain and undrain of a host or one GPU (no new work placed), each an event row."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from db.events import add_event
from db.gpus import set_gpu_drained
from db.hosts import set_host_drained
from db.models import Gpu, Host
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_HOST_GPU = re.compile(r"(?P<host>.+):(?P<idx>\d+)")
MAX_NAMES_SHOWN = 10


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
    host, gpu = _resolve(session, target)
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


def _resolve(session: Session, target: str) -> tuple[Host, Gpu | None]:
    text = target.strip()
    if not text:
        raise ConfigError("empty drain target: give HOST, HOST:GPU_INDEX or a GPU UUID")
    host = session.scalar(select(Host).where(Host.name == text))
    if host is not None:
        return host, None
    match = _HOST_GPU.fullmatch(text)
    if match is not None:
        host = session.scalar(select(Host).where(Host.name == match["host"]))
        if host is None:
            raise ConfigError(f"unknown host {match['host']!r}{_known_hosts(session)}")
        index = int(match["idx"])
        gpu = session.scalar(select(Gpu).where(Gpu.host_id == host.id, Gpu.idx == index))
        if gpu is None:
            known = sorted(session.scalars(select(Gpu.idx).where(Gpu.host_id == host.id)))
            listing = ", ".join(str(idx) for idx in known) or "none recorded"
            raise ConfigError(f"host {host.name!r} has no GPU {index} (known: {listing})")
        return host, gpu
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == text))
    if gpu is not None:
        owner = session.get(Host, gpu.host_id)
        if owner is not None:
            return owner, gpu
    raise ConfigError(f"unknown host or GPU {text!r}{_known_hosts(session)}")


def _known_hosts(session: Session) -> str:
    names = list(session.scalars(select(Host.name).order_by(Host.name).limit(MAX_NAMES_SHOWN + 1)))
    if not names:
        return "; the database knows no hosts yet (run `fleet status` or `fleet monitor` first)"
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (", ..." if len(names) > MAX_NAMES_SHOWN else "")
    return f"; known hosts: {shown}"
