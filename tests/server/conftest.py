"""Fixtures: a real `fleet serve` process over simulated GPU hosts, on a short-path socket."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleet.client.remote import RemoteFleet, open_remote
from fleet.sim.build import SimTools
from tests.dispatch.conftest import kill_task_groups, start_gpu_host, write_inventory
from tests.fixtures.cli import CliResult, FleetCli
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory
from tests.server.users import UnixUser, unique_group, unix_users

START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 15.0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (AF_UNIX paths are limited to 108 bytes), removed after."""
    path = Path(tempfile.mkdtemp(prefix="fs-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class ServerProcess:
    """A started `fleet serve`: its process, socket and what it printed."""

    process: asyncio.subprocess.Process
    socket_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server (by its recorded pid) and wait, bounded, for it to exit."""
        if self.process.returncode is None:
            self.process.send_signal(sig)
        try:
            await asyncio.wait_for(self.process.wait(), STOP_DEADLINE_S)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        assert self.process.returncode is not None
        return self.process.returncode

    async def stderr(self) -> str:
        """What the (stopped) server printed on stderr."""
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()

    async def stderr_so_far(self, quiet_s: float = 0.5) -> str:
        """What the (running) server has printed on stderr until it is quiet for `quiet_s`
        (read once: for a failure's message)."""
        assert self.process.stderr is not None
        chunks: list[bytes] = []
        for _ in range(64):  # bounded: at most 64 reads of 64 KiB
            try:
                chunk = await asyncio.wait_for(self.process.stderr.read(65536), quiet_s)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")


@dataclass
class ServeLab:
    """Sim GPU hosts in an inventory (keys pinned, GPUs recorded) and servers started on it."""

    cli: FleetCli
    hosts: list[SimHostHandle]
    run_dir: Path
    servers: list[ServerProcess] = field(default_factory=list)

    @property
    def socket_path(self) -> Path:
        return self.run_dir / "fleet" / "fleet.sock"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"XDG_RUNTIME_DIR": str(self.run_dir), **(extra or {})}

    def write_settings(self, text: str) -> None:
        config = self.cli.home / ".config" / "fleet" / "config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(text)

    async def run(self, *args: str, env: dict[str, str] | None = None) -> CliResult:
        return await self.cli.run(*args, env=self.env(env))

    async def spawn_server(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet.cli.main", "serve", *args, cwd=self.cli.home,
            env=self.cli.env(self.env()), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)

    async def serve(self, *args: str, socket_path: Path | None = None) -> ServerProcess:
        """Start `fleet serve ARGS` and wait (bounded) until /v1/status answers."""
        path = socket_path or self.socket_path
        extra = ("--socket", str(path)) if socket_path is not None else ()
        process = await self.spawn_server(*extra, *args)
        server = ServerProcess(process, path)
        self.servers.append(server)
        await wait_ready(server)
        return server

    def remote(self, server: ServerProcess) -> contextlib.AbstractAsyncContextManager[RemoteFleet]:
        return open_remote(server.socket_path)

    def kill_tasks(self) -> None:
        for handle in self.hosts:
            kill_task_groups(handle.host.home)


async def wait_ready(server: ServerProcess) -> None:
    """Until the server's snapshot covers every host (bounded by START_DEADLINE_S)."""
    from fleet.errors import FleetError

    deadline = time.monotonic() + START_DEADLINE_S
    last: object = None
    while time.monotonic() < deadline:
        if server.process.returncode is not None:
            raise AssertionError(f"fleet serve exited {server.process.returncode}: "
                                 f"{await server.stderr()}")
        if server.socket_path.exists():
            try:
                async with open_remote(server.socket_path) as remote:
                    snapshot = await remote.live_snapshot()
                if all(host.state != "unknown" for host in snapshot.hosts):
                    return
                last = [(h.spec.name, h.state) for h in snapshot.hosts]
            except FleetError as exc:
                last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"fleet serve not ready in {START_DEADLINE_S}s: {last}")


ServeLabFactory = Callable[..., Awaitable[ServeLab]]


@pytest.fixture
def two_users() -> Iterator[tuple[list[UnixUser], str]]:
    """Two real Unix users in one fresh group (removed after); needs root."""
    group = unique_group("flsock")
    with unix_users(2, [[group], [group]]) as users:
        yield users, group


@pytest.fixture
async def serve_lab(fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
                    short_dir: Path) -> AsyncIterator[ServeLabFactory]:
    """Factory: `await serve_lab(2, 1)` makes hosts gpu1 (2 GPUs) and gpu2 (1 GPU)."""
    labs: list[ServeLab] = []

    async def make(*gpu_counts: int, settings: str = "") -> ServeLab:
        handles = [await start_gpu_host(sim_ssh_host, sim_tools, fleet_cli, f"gpu{i}", count)
                   for i, count in enumerate(gpu_counts, start=1)]
        write_inventory(fleet_cli, handles)
        lab = ServeLab(fleet_cli, handles, short_dir)
        labs.append(lab)
        # Stalled after 3 s: the simulated hosts' SSH runs on the test's event loop.
        lab.write_settings("monitor:\n  interval: 0.25\n  stall_intervals: 12\n" + settings)
        result = await lab.run("status", "--accept-new", "--timeout", "30s",
                               env={"FLEET_SERVER": "local"})
        assert result.returncode == 0, result.stderr
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            for server in lab.servers:
                await server.stop()
            lab.kill_tasks()

