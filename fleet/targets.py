"""Resolving what a user names — a host, "HOST:IDX" or a GPU UUID — to stored rows, or an error.

Drain, history and events share it, so an unknown name is exit 2 naming the known ones
everywhere, never "no samples". It reads through a db.sql reader: a read-only command on an
SQLite file resolves names without loading SQLAlchemy, and drain resolves inside its write
transaction (`SessionReader`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from db.sql import Row, SqlReader
from fleet.errors import ConfigError
from fleet.probe.limits import MAX_INT

_HOST_GPU = re.compile(r"(?P<host>.+):(?P<idx>\d+)")
MAX_NAMES_SHOWN = 10
_HOST_COLUMNS = "SELECT id, name, drained, drain_reason FROM hosts"
_GPU_COLUMNS = "SELECT id, host_id, idx, uuid, drained, drain_reason FROM gpus"


@dataclass(frozen=True)
class TargetHost:
    """A stored host a user named, with its drain flag."""

    id: int
    name: str
    drained: bool
    drain_reason: str | None


@dataclass(frozen=True)
class TargetGpu:
    """A stored GPU a user named, with its drain flag."""

    id: int
    host_id: int
    idx: int
    uuid: str | None
    drained: bool
    drain_reason: str | None


def resolve_target(reader: SqlReader, target: str, *, what: str = "target") -> \
        tuple[TargetHost, TargetGpu | None]:
    """(host, None) for a host name; (host, gpu) for "HOST:IDX" or a GPU UUID; else ConfigError."""
    text = target.strip()
    if not text:
        raise ConfigError(f"empty {what}: give HOST, HOST:GPU_INDEX or a GPU UUID")
    host = _host(reader, "name = :name", {"name": text})
    if host is not None:
        return host, None
    return _resolve_gpu(reader, text)


def resolve_host(reader: SqlReader, name: str) -> TargetHost:
    """The stored host called `name`; ConfigError naming the known hosts otherwise."""
    host = _host(reader, "name = :name", {"name": name.strip()})
    if host is None:
        raise ConfigError(f"unknown host {name!r}{_known_hosts(reader)}")
    return host


def resolve_gpu(reader: SqlReader, target: str) -> tuple[TargetHost, TargetGpu]:
    """The stored GPU "HOST:IDX" or UUID; ConfigError naming what is known otherwise."""
    text = target.strip()
    if not text:
        raise ConfigError("empty GPU: give HOST:GPU_INDEX or a GPU UUID")
    host, gpu = _resolve_gpu(reader, text)
    if gpu is None:
        raise ConfigError(f"{text!r} is a host; give HOST:GPU_INDEX or a GPU UUID")
    return host, gpu


def _resolve_gpu(reader: SqlReader, text: str) -> tuple[TargetHost, TargetGpu | None]:
    match = _HOST_GPU.fullmatch(text)
    if match is not None:
        host = resolve_host(reader, match["host"])
        index = int(match["idx"])
        gpu = None if index > MAX_INT else _gpu(  # no GPU has it; SQLite could not bind it
            reader, "host_id = :host_id AND idx = :idx", {"host_id": host.id, "idx": index})
        if gpu is None:
            known = sorted(reader.scalars("SELECT idx FROM gpus WHERE host_id = :host_id",
                                          {"host_id": host.id}))
            listing = ", ".join(str(idx) for idx in known) or "none recorded"
            raise ConfigError(f"host {host.name!r} has no GPU {index} (known: {listing})")
        return host, gpu
    gpu = _gpu(reader, "uuid = :uuid", {"uuid": text})
    if gpu is not None:
        owner = _host(reader, "id = :id", {"id": gpu.host_id})
        if owner is not None:
            return owner, gpu
    raise ConfigError(f"unknown host or GPU {text!r}{_known_hosts(reader)}")


def _host(reader: SqlReader, where: str, parameters: dict[str, object]) -> TargetHost | None:
    row = reader.first(f"{_HOST_COLUMNS} WHERE {where}", parameters)
    return None if row is None else TargetHost(row[0], row[1], bool(row[2]), row[3])


def _gpu(reader: SqlReader, where: str, parameters: dict[str, object]) -> TargetGpu | None:
    row: Row | None = reader.first(f"{_GPU_COLUMNS} WHERE {where}", parameters)
    if row is None:
        return None
    gpu_id, host_id, idx, uuid, drained, drain_reason = row
    return TargetGpu(gpu_id, host_id, idx, uuid, bool(drained), drain_reason)


def _known_hosts(reader: SqlReader) -> str:
    names = reader.scalars("SELECT name FROM hosts ORDER BY name LIMIT :limit",
                           {"limit": MAX_NAMES_SHOWN + 1})
    if not names:
        return "; the database knows no hosts yet (run `fleet status` or `fleet monitor` first)"
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (", ..." if len(names) > MAX_NAMES_SHOWN else "")
    return f"; known hosts: {shown}"
