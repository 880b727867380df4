"""Browsing mDNS/DNS-SD services with python-zeroconf's asyncio API into validated records.

A DiscoverySession binds python-zeroconf to chosen interface addresses, browses the configured
service types, resolves each service (address, port, server, raw TXT) with bounded retries and
keeps the current view; every name and TXT byte is treated as hostile (fleet.discovery.txt).
A service that cannot be represented safely is skipped with a logged reason, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

import ifaddr
from zeroconf import Error as ZeroconfError
from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from fleet.discovery.txt import TxtRecord, TxtSummary, display_text, parse_txt, summarize
from fleet.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_SERVICE_TYPES = (
    "_ssh._tcp",
    "_sftp-ssh._tcp",
    "_fleet._tcp",
    "_gpu-sd._tcp",
    "_net-sd._tcp",
    "_hwgpus._tcp",
)
SSH_SERVICE_TYPES = frozenset({"_ssh._tcp", "_sftp-ssh._tcp"})
RESOLVE_TIMEOUT_MS = 1500
RESOLVE_ATTEMPTS = 3
MAX_SERVICES = 4096
# Linux socket options (not exported by Python 3.11's socket module): with 0 a socket receives
# only multicast groups joined on itself, not those joined by any socket of the host.
IP_MULTICAST_ALL = 49
IPV6_MULTICAST_ALL = 29

EventKind = Literal["added", "updated", "removed", "skipped"]


def short_type(service_type: str) -> str:
    """`_fleet._tcp.local.` → `_fleet._tcp`."""
    return service_type.removesuffix(".").removesuffix(".local")


def full_type(service_type: str) -> str:
    """`_fleet._tcp` → `_fleet._tcp.local.`; checks the `_name._tcp|_udp` shape."""
    short = short_type(service_type.strip())
    parts = short.split(".")
    if (len(parts) != 2 or not parts[0].startswith("_") or parts[1] not in ("_tcp", "_udp")
            or not 2 <= len(parts[0]) <= 16):
        raise ConfigError(f"service type {service_type!r} is not like _name._tcp")
    return f"{short}.local."


@dataclass(frozen=True)
class InterfaceSelection:
    """Where python-zeroconf binds: explicit addresses, or every interface (`addresses` empty)."""

    addresses: tuple[str, ...]
    ip_version: IPVersion

    @property
    def zeroconf_interfaces(self) -> list[str | int | tuple[tuple[str, int, int], int]] | \
            InterfaceChoice:
        return list(self.addresses) if self.addresses else InterfaceChoice.All

    def describe(self) -> str:
        return ", ".join(self.addresses) if self.addresses else "all interfaces"


def select_interfaces(choices: Sequence[str] | None, ip_version: str = "auto") -> \
        InterfaceSelection:
    """Interface addresses from `--interface` values: IP addresses or interface names.

    No choice means every interface (python-zeroconf's InterfaceChoice.All) — the documented
    default for operators; tests always pass addresses. `ip_version` is auto, v4, v6 or all.
    """
    addresses: list[str] = []
    adapters: list[ifaddr.Adapter] | None = None
    for choice in choices or ():
        text = choice.strip()
        try:
            addresses.append(str(ipaddress.ip_address(text)))
            continue
        except ValueError:
            pass
        if adapters is None:
            adapters = list(ifaddr.get_adapters())
        matching = [adapter for adapter in adapters if adapter.nice_name == text]
        if not matching:
            names = ", ".join(sorted({adapter.nice_name for adapter in adapters}))
            raise ConfigError(f"--interface {choice!r}: no such interface address or name "
                              f"(interfaces here: {names})")
        for adapter in matching:
            for ip in adapter.ips:
                if isinstance(ip.ip, str):
                    addresses.append(ip.ip)
                elif not ip.ip[0].startswith("fe80:"):  # link-local v6 needs a scope
                    addresses.append(ip.ip[0])
        if not any(True for adapter in matching for _ in adapter.ips):
            raise ConfigError(f"--interface {choice!r} has no IP address")
    addresses = list(dict.fromkeys(addresses))
    versions = {ipaddress.ip_address(address).version for address in addresses}
    wanted = {"v4": IPVersion.V4Only, "v6": IPVersion.V6Only, "all": IPVersion.All}
    if ip_version in wanted:
        chosen = wanted[ip_version]
        if chosen is IPVersion.V4Only:
            addresses = [a for a in addresses if ipaddress.ip_address(a).version == 4]
        elif chosen is IPVersion.V6Only:
            addresses = [a for a in addresses if ipaddress.ip_address(a).version == 6]
        if choices and not addresses:
            raise ConfigError(f"--interface {', '.join(choices)} has no {ip_version} address")
    elif ip_version != "auto":
        raise ConfigError(f"IP version {ip_version!r}: choose auto, v4, v6 or all")
    elif versions == {6}:
        chosen = IPVersion.V6Only
    elif versions == {4, 6}:
        chosen = IPVersion.All
    else:
        chosen = IPVersion.V4Only
    return InterfaceSelection(tuple(addresses), chosen)


def open_zeroconf(selection: InterfaceSelection) -> AsyncZeroconf:
    """AsyncZeroconf bound to `selection`, its shared socket deaf to other sockets' groups."""
    try:
        zeroconf = AsyncZeroconf(interfaces=selection.zeroconf_interfaces,
                                 ip_version=selection.ip_version)
    except (OSError, ValueError, ZeroconfError) as exc:
        raise ConfigError(f"cannot start mDNS on {selection.describe()}: {exc}") from exc
    _limit_multicast_to_own_groups(zeroconf.zeroconf)
    return zeroconf


def _limit_multicast_to_own_groups(zeroconf: Zeroconf) -> None:
    """Set IP_MULTICAST_ALL=0 on the shared listen socket (Linux), see LAB-NOTES."""
    listen_socket = getattr(zeroconf.engine, "_listen_socket", None)
    if not isinstance(listen_socket, socket.socket):
        log.debug("mDNS: no shared listen socket found; relying on per-interface sockets")
        return
    try:
        if listen_socket.family == socket.AF_INET6:
            listen_socket.setsockopt(socket.IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
            listen_socket.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        else:
            listen_socket.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
    except OSError as exc:
        log.debug("mDNS: cannot set IP_MULTICAST_ALL=0 (%s); foreign records may be seen", exc)


@dataclass(frozen=True)
class DiscoveredService:
    """One resolved service, every text field already made printable and capped."""

    service_type: str  # short form, e.g. "_fleet._tcp"
    key: str  # the full service name lower-cased: identity within a browse
    instance: str  # printable instance label (the part before the service type)
    server: str | None
    address: str
    addresses: tuple[str, ...]
    port: int
    txt: TxtRecord
    summary: TxtSummary
    seen_at: float

    @property
    def ssh_port(self) -> int:
        """Where the host's SSH is: the TXT's ssh_port, the SRV port for SSH types, else 22."""
        if self.summary.ssh_port is not None:
            return self.summary.ssh_port
        return self.port if self.service_type in SSH_SERVICE_TYPES else 22

    @property
    def display_name(self) -> str:
        """The best printable name: instance label, else announced hostname, else address."""
        return self.instance or self.summary.hostname or self.address


@dataclass(frozen=True)
class DiscoveryEvent:
    """A change in the browsed view; `service` is None for skipped records."""

    kind: EventKind
    service: DiscoveredService | None
    reason: str | None = None


def instance_label(full_name: str, service_type: str) -> str:
    """The printable instance part of `NAME._type._tcp.local.`."""
    suffix = "." + service_type
    raw = full_name[: -len(suffix)] if full_name.lower().endswith(suffix.lower()) else full_name
    return display_text(raw, limit=63)


def service_from_info(info: AsyncServiceInfo, service_type: str, now: float) -> \
        DiscoveredService | str:
    """A DiscoveredService, or the reason the resolved record cannot be used."""
    port = info.port
    if port is None or not 1 <= port <= 65535:
        return f"port {port!r} is not 1-65535"
    addresses = tuple(dict.fromkeys(info.parsed_addresses(IPVersion.V4Only)
                                    + info.parsed_scoped_addresses(IPVersion.V6Only)))
    if not addresses:
        return "no address record"
    record = parse_txt(info.text or b"")
    short = short_type(service_type)
    server = display_text(info.server.removesuffix("."), limit=255) if info.server else None
    return DiscoveredService(
        service_type=short,
        key=info.name.lower(),
        instance=instance_label(info.name, service_type),
        server=server or None,
        address=addresses[0],
        addresses=addresses,
        port=port,
        txt=record,
        summary=summarize(short, record),
        seen_at=now,
    )


@dataclass
class DiscoverySession:
    """Browse service types on chosen interfaces; `services` is the live view.

        async with DiscoverySession(select_interfaces(["127.0.0.1"])) as browse:
            await asyncio.sleep(2)
            print(browse.services)
    """

    interfaces: InterfaceSelection
    service_types: Sequence[str] = DEFAULT_SERVICE_TYPES
    on_event: Callable[[DiscoveryEvent], None] | None = None
    resolve_timeout_ms: int = RESOLVE_TIMEOUT_MS
    resolve_attempts: int = RESOLVE_ATTEMPTS
    services: dict[str, DiscoveredService] = field(default_factory=dict)
    removed: dict[str, DiscoveredService] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    _zeroconf: AsyncZeroconf | None = None
    _browser: AsyncServiceBrowser | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> DiscoverySession:
        types = [full_type(service_type) for service_type in self.service_types]
        self._zeroconf = open_zeroconf(self.interfaces)
        self._browser = AsyncServiceBrowser(self._zeroconf.zeroconf, types,
                                            handlers=[self._on_change])
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop browsing, cancel pending resolves, release the sockets."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._zeroconf is not None:
            await self._zeroconf.async_close()
            self._zeroconf = None

    async def wait_changed(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the next change; True if one happened."""
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str,
                   state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            gone = self.services.pop(name.lower(), None)
            if gone is not None:
                self.removed[gone.key] = gone
                self._emit(DiscoveryEvent("removed", gone))
            return
        if len(self.services) >= MAX_SERVICES and name.lower() not in self.services:
            self._skip(name, f"more than {MAX_SERVICES} services: ignored")
            return
        task = asyncio.get_running_loop().create_task(self._resolve(service_type, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, service_type: str, name: str) -> None:
        assert self._zeroconf is not None
        try:
            info = AsyncServiceInfo(service_type, name)
        except (ZeroconfError, ValueError) as exc:
            self._skip(name, f"unusable service name: {display_text(str(exc), 120)}")
            return
        resolved = False
        for _attempt in range(self.resolve_attempts):  # one request can be lost in bursts
            if await info.async_request(self._zeroconf.zeroconf, self.resolve_timeout_ms):
                resolved = True
                break
        if not resolved:
            self._skip(name, f"did not resolve after {self.resolve_attempts} attempts")
            return
        outcome = service_from_info(info, service_type, time.time())
        if isinstance(outcome, str):
            self._skip(name, outcome)
            return
        for problem in outcome.summary.problems:
            log.warning("mDNS %s at %s: %s", outcome.display_name, outcome.address, problem)
        previous = self.services.get(outcome.key)
        self.services[outcome.key] = outcome
        self.removed.pop(outcome.key, None)
        self._emit(DiscoveryEvent("added" if previous is None else "updated", outcome))

    def _skip(self, name: str, reason: str) -> None:
        message = f"{display_text(name, 120)}: {reason}"
        log.warning("mDNS record skipped: %s", message)
        if len(self.skipped) < MAX_SERVICES:
            self.skipped.append(message)
        self._emit(DiscoveryEvent("skipped", None, message))

    def _emit(self, event: DiscoveryEvent) -> None:
        self._changed.set()
        if self.on_event is not None:
            self.on_event(event)


@dataclass(frozen=True)
class BrowseResult:
    """What one bounded browse saw: live services, services that said goodbye, skipped records."""

    services: tuple[DiscoveredService, ...]
    removed: tuple[DiscoveredService, ...]
    skipped: tuple[str, ...]
    elapsed_s: float


async def browse_once(interfaces: InterfaceSelection, *, timeout: float,
                      service_types: Sequence[str] = DEFAULT_SERVICE_TYPES) -> BrowseResult:
    """Browse for `timeout` seconds and return what was seen."""
    if not 0 < timeout <= 3600:
        raise ConfigError(f"browse timeout must be in (0, 3600] seconds, got {timeout:g}")
    started = time.monotonic()
    async with DiscoverySession(interfaces, service_types) as session:
        await asyncio.sleep(timeout)
        services = tuple(session.services.values())
        removed = tuple(session.removed.values())
        skipped = tuple(session.skipped)
    return BrowseResult(services, removed, skipped, time.monotonic() - started)
