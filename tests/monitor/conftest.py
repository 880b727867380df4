"""Fixtures for monitor tests: simulated GPU hosts over real SSH, a database, fast settings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from db.engine import Database, open_database
from fleet.model import HostSpec
from fleet.monitor.config import Settings, default_settings
from fleet.monitor.monitor import Monitor
from fleet.sim.build import SimTools
from fleet.sim.gpus import SimHostGpus, write_config
from fleet.sim.sshhost import SimSshHost
from fleet.ssh.hostkeys import pin_host_key
from fleet.ssh.options import SshOptions
from tests.fixtures.database import PgServer

HOST_PATH = "/usr/bin:/bin"  # the hosts' python3 is Debian's (no pynvml): the probe ships its own


@dataclass
class MonitoredHost:
    """A SimSshHost with simulated GPUs: its server, spec and GPU config file."""

    host: SimSshHost
    spec: HostSpec
    config_path: Path


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    """A migrated database of its own (SQLite file or PostgreSQL database), closed after."""
    opened = open_database(db_url)
    yield opened
    opened.close()


@pytest.fixture
def fast_settings() -> Settings:
    """Short intervals and timeouts so faults show within a second or two.

    A probe counts as stalled after 2 s (10 intervals), not 0.6 s: the simulated hosts' SSH
    runs on the test's own event loop, which a loaded machine can hold up that long.
    """
    settings = default_settings()
    settings = settings.with_values(
        "monitor", interval=0.2, flush_interval=0.2, reconnect_initial=0.1, reconnect_max=0.5,
        stop_grace=2.0, stall_intervals=10,
    )
    return settings.with_values(
        "ssh", connect_timeout=2.0, login_timeout=2.0, keepalive_interval=1.0,
        command_timeout=5.0,
    )


GpuHostFactory = Callable[..., Awaitable[MonitoredHost]]


@pytest.fixture
async def gpu_hosts(
    sim_ssh_host: Any, sim_tools: SimTools, tmp_path: Path, sim_ssh_options: SshOptions
) -> AsyncIterator[GpuHostFactory]:
    """`await gpu_hosts(name, gpus)`: a started SimSshHost whose sessions see `gpus`.

    Its host key is pinned in sim_ssh_options' pinned file, so the monitor trusts it.
    """

    async def start(name: str, gpus: SimHostGpus) -> MonitoredHost:
        config_path = tmp_path / f"gpus-{name}.conf"
        write_config(config_path, gpus)
        env = sim_tools.env(config_path)
        env["PATH"] = f"{sim_tools.bin_dir}:{HOST_PATH}"
        handle = await sim_ssh_host(name, env=env)
        await asyncio.to_thread(
            pin_host_key, sim_ssh_options.pinned_hosts_file, handle.spec.address,
            handle.spec.port, handle.host_key.convert_to_public(),
        )
        return MonitoredHost(handle.host, handle.spec, config_path)

    yield start


@pytest.fixture
async def monitors() -> AsyncIterator[list[Monitor]]:
    """Monitors a test started; stopped at teardown if the test did not."""
    started: list[Monitor] = []
    yield started
    for monitor in started:
        await monitor.stop()


async def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, step: float = 0.05
) -> None:
    """Poll `condition` until true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(step)


def with_spec(host: MonitoredHost, **changes: Any) -> HostSpec:
    """The host's spec with some fields changed."""
    return replace(host.spec, **changes)


class TcpRelay:
    """A TCP relay on 127.0.0.1 in front of a server: stop() drops every connection and the
    listener (the host "goes away"), start() listens on the same port again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    target.write(data)
                    await target.drain()
            except (ConnectionError, OSError):
                pass  # a side went away (the test closed it, or cut the relay): this way ends
            finally:
                target.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)


async def relayed(host: MonitoredHost, options: SshOptions) -> tuple[TcpRelay, HostSpec]:
    """A started TcpRelay in front of `host` (its key pinned in `options`' pinned file for the
    relay's port); returns it and the spec that reaches the host through it."""
    relay = TcpRelay(host.spec.port)
    port = await relay.start()
    await asyncio.to_thread(pin_host_key, options.pinned_hosts_file, "127.0.0.1", port,
                            host.host.public_key)
    return relay, replace(host.spec, port=port)


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone: PID 1 reaps lazily here)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def pg_database(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """This test's own migrated database on the suite's server; its name (connections are
    allowed again before it is dropped, for tests that cut them)."""
    name = pg_server.create_database(request.node.name)
    try:
        yield name
    finally:
        pg_server.admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        pg_server.drop_database(name)
