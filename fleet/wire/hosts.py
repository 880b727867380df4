"""Hosts on the wire: registered ones (`/v1/hosts`, db.types.HostRow) and managed ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec import Struct

from fleet.wire.codec import from_wire, to_wire

if TYPE_CHECKING:
    from fleet.model import HostSpec
    from fleet.records import HostRow


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
    from fleet.records import HostRow

    return [from_wire(host, HostRow) for host in reply.hosts]


class ManagedHostWire(Struct, frozen=True):
    """fleet.model.HostSpec in full: a host the server manages, as its inventory says."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    ssh_config_identity_files: tuple[str, ...] = ()
    ssh_config_host: str | None = None
    python: str = "python3"
    connection: str = "ssh"
    proxy_jump: str | None = None
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    source: str = ""


class ManagedList(Struct, frozen=True):
    """`GET /v1/managed`: the managed hosts (inventory + adopted) matching `?hosts=`."""

    hosts: tuple[ManagedHostWire, ...]


def managed_to_wire(specs: Sequence[HostSpec]) -> ManagedList:
    """Managed hosts as the reply."""
    return ManagedList(tuple(to_wire(spec, ManagedHostWire) for spec in specs))


def managed_from_wire(reply: ManagedList) -> tuple[HostSpec, ...]:
    """The reply as the HostSpecs `Fleet.managed_hosts()` returns."""
    from fleet.model import HostSpec

    return tuple(from_wire(host, HostSpec) for host in reply.hosts)
