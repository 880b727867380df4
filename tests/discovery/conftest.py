"""Helpers for discovery tests: loopback-only mDNS registrations, raw hostile packets, announcers.

Every socket here binds to 127.0.0.1 (never 0.0.0.0); instance names carry a per-run token so
concurrent runs on this machine cannot be confused with each other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from zeroconf import DNSAddress, DNSOutgoing, DNSPointer, DNSService, DNSText, IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from tests.fixtures.cli import FleetCli

LOOPBACK = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]
_CLASS_IN = 1
_CLASS_UNIQUE = 0x8000
_TYPE_A, _TYPE_PTR, _TYPE_TXT, _TYPE_SRV = 1, 12, 16, 33
_RESPONSE_FLAGS = 0x8400  # QR + AA


@pytest.fixture
def token() -> str:
    """A short token unique to this test run, for service instance names."""
    return f"t{os.getpid()}{uuid.uuid4().hex[:6]}"


@dataclass
class LoopbackRegistry:
    """python-zeroconf registrations on 127.0.0.1, unregistered (with goodbye) at teardown."""

    zeroconf: AsyncZeroconf
    infos: list[AsyncServiceInfo] = field(default_factory=list)

    async def register(self, service_type: str, instance: str, *, port: int,
                       properties: Mapping[str, str] | bytes, server: str | None = None,
                       address: str = LOOPBACK) -> AsyncServiceInfo:
        info = AsyncServiceInfo(
            f"{service_type}.local.", f"{instance}.{service_type}.local.", port=port,
            properties=properties if isinstance(properties, bytes) else dict(properties),
            server=server or f"{instance}.local.", addresses=[socket.inet_aton(address)])
        await (await self.zeroconf.async_register_service(info))
        self.infos.append(info)
        return info

    async def unregister(self, info: AsyncServiceInfo) -> None:
        await (await self.zeroconf.async_unregister_service(info))
        self.infos.remove(info)

    def send_raw(self, service_type: str, instance: str, *, port: int, txt: bytes,
                 server: str, address: str = LOOPBACK) -> None:
        """An unsolicited response with names python-zeroconf would refuse to register."""
        full_type = f"{service_type}.local."
        name = f"{instance}.{full_type}"
        out = DNSOutgoing(_RESPONSE_FLAGS)
        out.add_answer_at_time(DNSPointer(full_type, _TYPE_PTR, _CLASS_IN, 120, name), 0)
        out.add_answer_at_time(DNSService(name, _TYPE_SRV, _CLASS_IN | _CLASS_UNIQUE, 120, 0, 0,
                                          port, server), 0)
        out.add_answer_at_time(DNSText(name, _TYPE_TXT, _CLASS_IN | _CLASS_UNIQUE, 120, txt), 0)
        out.add_answer_at_time(DNSAddress(server, _TYPE_A, _CLASS_IN | _CLASS_UNIQUE, 120,
                                          socket.inet_aton(address)), 0)
        self.zeroconf.zeroconf.async_send(out)


@pytest.fixture
async def loopback_registry() -> AsyncIterator[LoopbackRegistry]:
    zeroconf = AsyncZeroconf(interfaces=[LOOPBACK], ip_version=IPVersion.V4Only)
    registry = LoopbackRegistry(zeroconf)
    try:
        yield registry
    finally:
        for info in list(registry.infos):
            await registry.unregister(info)
        await zeroconf.async_close()


async def discover_until_listed(cli: FleetCli, name: str, *args: str,
                                deadline_s: float = 30.0) -> dict[str, dict[str, Any]]:
    """`fleet --json discover ARGS`'s hosts by name, browsing again (bounded) until `name` is
    among them: one short browse can miss a fresh announcement on a busy machine."""
    deadline = time.monotonic() + deadline_s
    while True:
        listed = await cli.run("--json", "discover", *args)
        assert listed.returncode == 0, listed.stderr
        hosts = {host["name"]: host for host in listed.json()["hosts"]}
        if name in hosts or time.monotonic() > deadline:
            return hosts


@dataclass
class AnnounceProcess:
    """A running `fleet announce` subprocess."""

    process: asyncio.subprocess.Process
    first_line: str

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), 15)


async def start_announce(args: list[str], env: Mapping[str, str],
                         timeout: float = 20.0) -> AnnounceProcess:
    """Start `fleet announce ARGS`; returns once it printed its first `announcing` line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "announce", *args, cwd=ROOT, env=dict(env),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    if not line:
        assert process.stderr is not None
        error = await process.stderr.read()
        await process.wait()
        raise AssertionError(f"fleet announce exited: {error.decode(errors='replace')}")
    return AnnounceProcess(process, line.decode())


@pytest.fixture
async def announcers() -> AsyncIterator[list[AnnounceProcess]]:
    """Announce processes a test started; stopped (SIGTERM, goodbye) at teardown."""
    started: list[AnnounceProcess] = []
    try:
        yield started
    finally:
        for announcer in started:
            if announcer.process.returncode is None:
                try:
                    await announcer.stop()
                except TimeoutError:
                    announcer.process.kill()
                    await announcer.process.wait()
