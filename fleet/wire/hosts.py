"""Registered hosts on the wire (`/v1/hosts`): db.types.HostRow, state and facts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from db.types import HostRow


class HostWire(Struct, frozen=True):
    """db.types.HostRow: a stored host with its facts and state (times epoch seconds)."""

    id: int
    name: str
    address: str
    port: int
    user: str | None
    connection: str
    source: str
    groups: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    state: str
    state_reason: str | None
    drained: bool
    drain_reason: str | None
    hostname: str | None
    kernel: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    cpu_count: int | None
    memory_total_bytes: int | None
    gpu_count: int | None
    first_seen: int
    last_seen: int
    last_probe_at: int | None


class HostList(Struct, frozen=True):
    """`GET /v1/hosts`."""

    hosts: tuple[HostWire, ...]


def hosts_to_wire(rows: list[HostRow]) -> HostList:
    """Stored hosts as the reply."""
    return HostList(tuple(to_wire(row, HostWire) for row in rows))


def hosts_from_wire(reply: HostList) -> list[HostRow]:
    """The reply as the same HostRows `Fleet.registered_hosts()` returns."""
    from db.types import HostRow

    return [from_wire(host, HostRow) for host in reply.hosts]
