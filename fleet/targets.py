"""Resolving what a user names — a host, "HOST:IDX" or a GPU UUID — to stored rows, or an error.

Drain, history and events share it, so an unknown name is exit 2 naming the known ones
everywhere, never "no samples".
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlalchemy import select

from db.models import Gpu, Host
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

_HOST_GPU = re.compile(r"(?P<host>.+):(?P<idx>\d+)")
MAX_NAMES_SHOWN = 10


def resolve_target(session: Session, target: str, *, what: str = "target") -> \
        tuple[Host, Gpu | None]:
    """(host, None) for a host name; (host, gpu) for "HOST:IDX" or a GPU UUID; else ConfigError."""
    text = target.strip()
    if not text:
        raise ConfigError(f"empty {what}: give HOST, HOST:GPU_INDEX or a GPU UUID")
    host = session.scalar(select(Host).where(Host.name == text))
    if host is not None:
        return host, None
    return _resolve_gpu(session, text)


def resolve_host(session: Session, name: str) -> Host:
    """The stored host called `name`; ConfigError naming the known hosts otherwise."""
    host = session.scalar(select(Host).where(Host.name == name.strip()))
    if host is None:
        raise ConfigError(f"unknown host {name!r}{_known_hosts(session)}")
    return host


def resolve_gpu(session: Session, target: str) -> tuple[Host, Gpu]:
    """The stored GPU "HOST:IDX" or UUID; ConfigError naming what is known otherwise."""
    text = target.strip()
    if not text:
        raise ConfigError("empty GPU: give HOST:GPU_INDEX or a GPU UUID")
    host, gpu = _resolve_gpu(session, text)
    if gpu is None:
        raise ConfigError(f"{text!r} is a host; give HOST:GPU_INDEX or a GPU UUID")
    return host, gpu


def _resolve_gpu(session: Session, text: str) -> tuple[Host, Gpu | None]:
    match = _HOST_GPU.fullmatch(text)
    if match is not None:
        host = resolve_host(session, match["host"])
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
