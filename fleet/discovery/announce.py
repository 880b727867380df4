"""`fleet announce`: publish this host's `_fleet._tcp` (and HW-SD `_gpu-sd._tcp`) GPU summary.

The summary comes from the same probe code the controller uses (fleet.probe.runner.probe_local),
is re-read every `reprobe_interval_s` and re-published only when it changed; on stop every
service is unregistered and the unregister task awaited, so browsers get goodbye packets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import ifaddr
from zeroconf import Error as ZeroconfError
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from fleet.discovery.browse import InterfaceSelection, open_zeroconf
from fleet.discovery.txt import build_txt
from fleet.errors import ConfigError, ProbeError
from fleet.model import HostSpec
from fleet.reports import ProbeReport

log = logging.getLogger(__name__)

FLEET_TXT_VERSION = "1"
HWSD_MAX_GPUS_LISTED = 16
GIB = 1024**3
DEFAULT_REPROBE_S = 60.0
PROBE_TIMEOUT_S = 30.0
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9-]+")
_INSTANCE_UNSAFE = re.compile(r"[^\w .-]+")

ProbeFunction = Callable[[], Awaitable[ProbeReport | None]]


@dataclass(frozen=True)
class AnnounceConfig:
    """What to announce and where."""

    interfaces: InterfaceSelection
    hostname: str
    ssh_port: int = 22
    session: str | None = None
    hwsd: bool = False
    instance: str | None = None  # default: the hostname
    reprobe_interval_s: float = DEFAULT_REPROBE_S

    def __post_init__(self) -> None:
        if not 1 <= self.ssh_port <= 65535:
            raise ConfigError(f"--ssh-port {self.ssh_port} is not 1-65535")
        if not 1.0 <= self.reprobe_interval_s <= 86400:
            raise ConfigError("the re-probe interval must be between 1 s and 1 day")

    @property
    def instance_name(self) -> str:
        """The DNS-SD instance label (printable, no control characters, ≤ 63 bytes)."""
        cleaned = _INSTANCE_UNSAFE.sub("-", self.instance or self.hostname).strip(" .-")
        return cleaned.encode("utf-8")[:63].decode("utf-8", errors="ignore") or "fleet-host"

    @property
    def server(self) -> str:
        label = _LABEL_UNSAFE.sub("-", self.instance or self.hostname).strip("-")[:63]
        return f"{label or 'fleet-host'}.local."


def fleet_txt(report: ProbeReport | None, *, ssh_port: int, session: str | None) -> \
        dict[str, str]:
    """The `_fleet._tcp` TXT: v, session, ssh_port, gpus, gpu_model, mem_gb (total GPU memory)."""
    values: dict[str, str | int | float | None] = {"v": FLEET_TXT_VERSION, "session": session,
                                                   "ssh_port": ssh_port}
    if report is not None:
        values["gpus"] = len(report.gpus)
        if report.gpus:
            values["gpu_model"] = next((gpu.name for gpu in report.gpus if gpu.name), None)
            memory = [gpu.memory_total_bytes for gpu in report.gpus if gpu.memory_total_bytes]
            values["mem_gb"] = round(sum(memory) / GIB) if memory else None
    return build_txt(values)


def hwsd_txt(report: ProbeReport | None, *, hostname: str, session: str | None,
             node_id: str, ssh_port: int) -> dict[str, str]:
    """HW-SD `_gpu-sd._tcp` TXT: `GPU Count`, `GPU<i> Type`, `GPU<i> Device`, Hostname, ...

    `ssh_port` is fleet's addition (HW-SD browsers ignore unknown keys)."""
    values: dict[str, str | int | float | None] = {
        "Hostname": hostname, "Session": session or "default", "NodeID": node_id,
        "ssh_port": ssh_port,
        "GPU Count": len(report.gpus) if report is not None else 0,
    }
    for gpu in (report.gpus if report is not None else ())[:HWSD_MAX_GPUS_LISTED]:
        values[f"GPU{gpu.index} Type"] = gpu.name
        values[f"GPU{gpu.index} Device"] = gpu.pci_bus_id or gpu.uuid
    return build_txt(values)


def announce_addresses(selection: InterfaceSelection) -> list[str]:
    """Addresses to publish: the chosen ones, else every non-loopback address of this host."""
    if selection.addresses:
        return list(selection.addresses)
    found: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            address = ipaddress.ip_address(text)
            if not (address.is_loopback or address.is_link_local):
                found.append(text)
    if not found:
        raise ConfigError("no non-loopback address to announce; pass --interface")
    return found


async def probe_this_host(timeout: float = PROBE_TIMEOUT_S) -> ProbeReport | None:
    """This machine's probe reading (None, logged, when the probe fails)."""
    from fleet.probe.runner import probe_local

    spec = HostSpec(name="localhost", address="127.0.0.1", connection="local")
    try:
        return await probe_local(spec, timeout=timeout)
    except ProbeError as exc:
        log.warning("announce: probe failed, publishing no GPU summary: %s", exc)
        return None


class Announcer:
    """Registered services of one host; publish() registers or updates, withdraw() unregisters."""

    def __init__(self, config: AnnounceConfig, zeroconf: AsyncZeroconf, node_id: str) -> None:
        self.config = config
        self.zeroconf = zeroconf
        self.node_id = node_id
        self.addresses = announce_addresses(config.interfaces)
        self.published: dict[str, AsyncServiceInfo] = {}

    def _infos(self, report: ProbeReport | None) -> dict[str, AsyncServiceInfo]:
        config = self.config
        txts = {"_fleet._tcp": fleet_txt(report, ssh_port=config.ssh_port,
                                         session=config.session)}
        if config.hwsd:
            txts["_gpu-sd._tcp"] = hwsd_txt(report, hostname=config.hostname,
                                            session=config.session, node_id=self.node_id,
                                            ssh_port=config.ssh_port)
        return {
            kind: AsyncServiceInfo(
                f"{kind}.local.", f"{config.instance_name}.{kind}.local.",
                port=config.ssh_port, properties=dict(txt), server=config.server,
                parsed_addresses=self.addresses)
            for kind, txt in txts.items()
        }

    async def publish(self, report: ProbeReport | None) -> bool:
        """Register the services, or update those whose TXT changed; True if anything was sent."""
        changed = False
        for kind, info in self._infos(report).items():
            current = self.published.get(kind)
            try:
                if current is None:
                    await (await self.zeroconf.async_register_service(info))
                elif current.text != info.text:
                    info.name = current.name  # keep a name python-zeroconf may have changed
                    await (await self.zeroconf.async_update_service(info))
                else:
                    continue
            except (ZeroconfError, OSError) as exc:
                raise ConfigError(f"cannot publish {info.name!r}: {exc}") from exc
            self.published[kind] = info
            changed = True
        return changed

    async def withdraw(self) -> None:
        """Unregister every published service, awaiting the goodbye packets."""
        for kind, info in list(self.published.items()):
            await (await self.zeroconf.async_unregister_service(info))
            del self.published[kind]


def node_id() -> str:
    """A stable id for HW-SD's NodeID: /etc/machine-id's start, else the hostname."""
    try:
        with open("/etc/machine-id", encoding="ascii") as handle:
            text = handle.read(64).strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text[:12] if re.fullmatch(r"[0-9a-f]{12,}", text) else socket.gethostname()


async def run_announcer(config: AnnounceConfig, stop: asyncio.Event, *,
                        probe: ProbeFunction = probe_this_host,
                        on_publish: Callable[[dict[str, dict[str, str]]], None] | None = None,
                        ) -> int:
    """Announce until `stop` is set: probe, publish, re-probe every interval; returns rounds."""
    zeroconf = open_zeroconf(config.interfaces)
    announcer = Announcer(config, zeroconf, node_id())
    rounds = 0
    try:
        while not stop.is_set():
            report = await probe()
            rounds += 1
            if await announcer.publish(report) and on_publish is not None:
                on_publish({kind: {key.decode("utf-8", "replace"): (value or b"").decode(
                    "utf-8", "replace") for key, value in info.properties.items()}
                    for kind, info in announcer.published.items()})
            try:
                await asyncio.wait_for(stop.wait(), config.reprobe_interval_s)
            except TimeoutError:
                continue
    finally:
        try:
            await asyncio.shield(announcer.withdraw())
        finally:
            await zeroconf.async_close()
    return rounds
