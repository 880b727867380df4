"""`/v1/watch` over a real Unix socket: a stuck reader is dropped, another keeps receiving."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from fleet.caller import Caller
from fleet.client.remote import open_remote
from fleet.inventory import Inventory
from fleet.model import HostSpec
from fleet.reports import GpuReport, HostReport, ProbeReport
from fleet.server.app import StatusSource, create_app
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.routes import add_v1_routes
from fleet.server.stream import Broadcaster
from fleet.server.watch import snapshot_frame
from fleet.service import Fleet, open_database
from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot
from fleet.ssh.options import SshOptions

EMPTY = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
QUEUE = 4
FRAMES = 20


def _big_snapshot(taken_at: float, hosts: int = 120) -> FleetSnapshot:
    """About half a megabyte of JSON: one frame fills a socket's buffers."""
    rows = []
    for h in range(hosts):
        gpus = tuple(GpuReport(i, uuid=f"GPU-{h}-{i}", name="Sim H100",
                               memory_total_bytes=80 << 30, utilization_gpu_pct=float(i))
                     for i in range(8))
        report = ProbeReport(1, taken_at, HostReport(hostname=f"host{h}"), gpus)
        rows.append(HostSnapshot(HostSpec(f"host{h}", f"10.0.{h // 250}.{h % 250}"), "up",
                                 report=report, last_seen=taken_at,
                                 gpus=tuple(GpuSnapshot(f"host{h}", g.index, g) for g in gpus)))
    return FleetSnapshot(taken_at, tuple(rows))


@dataclass
class Served:
    socket_path: Path
    broadcaster: Broadcaster


@pytest.fixture
async def served(tmp_path: Path, short_dir: Path) -> AsyncIterator[Served]:
    """The /v1 app in this process on a Unix socket, fed by hand through its broadcaster."""
    service = Fleet(open_database(str(tmp_path / "fleet.db")), EMPTY, SshOptions())
    broadcaster = Broadcaster(QUEUE)
    identities = Identities((), os.getuid())
    app = create_app(StatusSource(service.snapshot),
                     lambda app: add_v1_routes(app, service, identities, broadcaster,
                                               Jobs(tmp_path / "staged")))
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2)
    await runner.setup()
    path = short_dir / "w.sock"
    await web.UnixSite(runner, str(path)).start()
    try:
        yield Served(path, broadcaster)
    finally:
        broadcaster.close()
        await runner.cleanup()
        service.close()


async def _stuck_reader(path: Path) -> socket.socket:
    """A client that asks for the stream and then never reads."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, str(path))
    await loop.sock_sendall(sock, b"GET /v1/watch HTTP/1.1\r\nHost: fleet\r\n\r\n")
    return sock


async def _read_until_closed(sock: socket.socket, limit_s: float) -> int:
    """Bytes read until the server closes the connection (bounded by `limit_s`)."""
    loop = asyncio.get_running_loop()
    total = 0
    async with asyncio.timeout(limit_s):
        while True:
            try:
                chunk = await loop.sock_recv(sock, 1 << 20)
            except ConnectionResetError:
                return total
            if not chunk:
                return total
            total += len(chunk)


async def test_a_stuck_watcher_is_dropped_and_another_keeps_receiving(served: Served) -> None:
    stuck = await _stuck_reader(served.socket_path)
    received: list[float] = []
    got_one = asyncio.Event()

    async def follow() -> None:
        async with open_remote(served.socket_path) as remote:
            async for snapshot in remote.watch():
                received.append(snapshot.taken_at)
                got_one.set()
                if len(received) == FRAMES:
                    return

    follower = asyncio.create_task(follow())
    async with asyncio.timeout(10):
        while len(served.broadcaster.subscribers) < 2:
            await asyncio.sleep(0.01)
    frame_bytes = 0
    for i in range(FRAMES):
        frame = snapshot_frame(_big_snapshot(1000.0 + i))
        frame_bytes += len(frame)
        got_one.clear()
        served.broadcaster.publish(frame)
        async with asyncio.timeout(20):  # the healthy client takes each frame in turn
            await got_one.wait()
    await asyncio.wait_for(follower, 20)

    assert received == [1000.0 + i for i in range(FRAMES)]
    assert served.broadcaster.dropped == 1
    async with asyncio.timeout(5):  # the follower's stream ends when it hangs up
        while served.broadcaster.subscribers:
            await asyncio.sleep(0.05)
    read_by_stuck = await _read_until_closed(stuck, 20)
    assert read_by_stuck < frame_bytes / 2  # it was cut off, not served everything slowly
    stuck.close()


async def test_whoami_is_the_peer_not_a_header(served: Served) -> None:
    async with open_remote(served.socket_path) as remote:
        me = await remote.whoami()
    from fleet.caller import user_name

    assert (me.user, me.uid, me.is_admin) == (user_name(os.getuid()), os.getuid(), True)
    assert me.server_pid == os.getpid()
    assert Caller(me.user, me.uid).may_act_on(me.user)


async def test_the_readme_lab_mode_example_runs(served: Served) -> None:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    section = readme.read_text().split("## Lab mode (`fleet serve`)", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    code = match.group(1).replace("/run/fleet/fleet.sock", str(served.socket_path))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    from fleet.caller import user_name

    assert stdout.decode().splitlines() == [f"{user_name(os.getuid())} admin"]
