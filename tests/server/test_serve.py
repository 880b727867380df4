"""A real `fleet serve` over simulated GPU hosts: same answers as local, bad input, lifecycle."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import signal
import stat
from pathlib import Path

import aiohttp
import pytest

from db.events import add_event
from db.tasks import create_task
from fleet.client.remote import open_remote
from fleet.errors import ConfigError
from fleet.service import open as open_fleet
from tests.dispatch.conftest import group_alive
from tests.server.conftest import ServeLab, ServeLabFactory, ServerProcess, wait_ready

SLEEPER = "import os, time\nprint(os.getpgrp(), flush=True)\ntime.sleep(60)\n"


async def _raw(socket_path: Path, method: str, path: str,
               data: bytes | None = None) -> tuple[int, dict[str, object]]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session, \
            session.request(method, f"http://fleet{path}", data=data) as reply:
        body = await reply.read()
        assert b"Traceback" not in body
        return reply.status, json.loads(body)


async def _seed_tasks(lab: ServeLab) -> None:
    async with open_fleet(str(lab.cli.db_path)) as local:
        with local.database.session() as session:
            for name, owner in (("a", "ann"), ("b", "bob")):
                create_task(session, name=name, script=f"{name}.py", args=("x",),
                            gpus_requested=1, owner=owner, now=1000)
            for i in range(120):  # more than the default page of 100
                add_event(session, ts=1000 + i, kind="test_note", severity="info",
                          message=f"note {i}")


async def test_reads_through_the_server_equal_local_answers(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    await _seed_tasks(lab)
    server = await lab.serve()
    async with open_fleet(str(lab.cli.db_path), lab.cli.home / "inventory.yaml") as local, \
            lab.remote(server) as remote:
        await local.drain("gpu2", "fan", by="test")
        assert await remote.tasks() == await local.tasks()
        assert await remote.tasks(states=["queued"], limit=1) == \
            await local.tasks(states=["queued"], limit=1)
        first = (await local.tasks())[0]
        assert await remote.task(first.id) == first
        assert await remote.events(kind="host_drained") == \
            await local.events(kind="host_drained")
        assert await remote.allocations() == await local.allocations()
        assert await remote.allocations(active_only=False) == \
            await local.allocations(active_only=False)
        every_local = await local.events(limit=None)  # the monitor may add events meanwhile
        every_remote = await remote.events(limit=None)
        assert len(every_local) > 120
        assert [e for e in every_remote if e.id <= every_local[-1].id] == every_local
        assert await remote.events(limit=1, severity="info", kind="host_drained") == \
            await local.events(limit=1, severity="info", kind="host_drained")
        remote_hosts = {row.name: (row.address, row.port, row.gpu_count, row.drained)
                        for row in await remote.registered_hosts()}
        local_hosts = {row.name: (row.address, row.port, row.gpu_count, row.drained)
                       for row in await local.registered_hosts()}
        assert remote_hosts == local_hosts == {
            "gpu1": ("127.0.0.1", lab.hosts[0].port, 2, False),
            "gpu2": ("127.0.0.1", lab.hosts[1].port, 1, True)}
        assert await remote.managed_hosts() == await local.managed_hosts()
        assert [spec.name for spec in await remote.managed_hosts("gpu2")] == ["gpu2"]
        statuses = await remote.status()
        assert [(s.spec.name, s.state, len(s.report.gpus) if s.report else 0)
                for s in statuses] == [("gpu1", "up", 2), ("gpu2", "up", 1)]
        assert [s.spec.name for s in await remote.status("gpu2")] == ["gpu2"]
        with pytest.raises(ConfigError, match="nope"):
            await remote.status("nope")
        with pytest.raises(ConfigError, match="999"):
            await remote.task(999)


async def test_curl_reads_status_over_the_socket(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    process = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "20", "--unix-socket", str(server.socket_path),
        "http://fleet/v1/status", stdout=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0
    data = json.loads(stdout)
    assert [host["spec"]["name"] for host in data["hosts"]] == ["gpu1"]
    assert [gpu["reading"]["uuid"] is not None for gpu in data["hosts"][0]["gpus"]] == [True]


async def test_malformed_oversized_and_unknown_requests_get_error_structs(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    path = server.socket_path
    status, body = await _raw(path, "POST", "/v1/drain", b'{"target": ')
    assert status == 400 and body["error"]["code"] == "bad_request"  # type: ignore[index]
    status, body = await _raw(path, "POST", "/v1/drain", b'{"target": "gpu1", "by": "x"}')
    assert status == 400 and "by" in body["error"]["message"]  # type: ignore[index]
    status, body = await _raw(path, "POST", "/v1/drain",
                              b'{"target": "' + b"a" * 200_000 + b'"}')
    assert status == 413 and body["error"]["code"] == "too_large"  # type: ignore[index]
    status, body = await _raw(path, "GET", "/v1/tasks?limit=many")
    assert status == 400
    status, body = await _raw(path, "GET", "/v1/no/such/thing")
    assert status == 404 and body["error"]["code"] == "not_found"  # type: ignore[index]
    status, body = await _raw(path, "GET", "/v1/drain")
    assert status == 405
    status, body = await _raw(path, "POST", "/v1/drain", b'{"target": "nohost"}')
    assert status == 400 and body == {"error": {
        "code": "bad_input", "exit_code": 2,
        "message": "unknown host or GPU 'nohost'; known hosts: gpu1"}}
    status, body = await _raw(path, "GET", "/v1/status")  # still serving
    assert status == 200 and body["hosts"]


async def test_socket_is_private_by_default_and_group_readable_with_group(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    assert stat.S_IMODE(server.socket_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.socket_path.parent.stat().st_mode) == 0o700
    assert await server.stop() == 0
    if os.geteuid() != 0:
        pytest.skip("--group needs root to hand the socket to another group")
    group = grp.getgrgid(100 if _has_gid(100) else os.getgid())
    shared = lab.run_dir / "shared" / "fleet.sock"
    grouped = await lab.serve("--group", group.gr_name, socket_path=shared)
    info = grouped.socket_path.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, group.gr_gid)
    assert stat.S_IMODE(grouped.socket_path.parent.stat().st_mode) == 0o750


def _has_gid(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


# A lock file beside SQLite; on PostgreSQL a server on another socket is the standby instead
# (tests/server/test_pair.py), one on the same socket is refused on both.
async def test_second_server_is_refused_naming_the_first_and_stale_socket_replaced(
        serve_lab: ServeLabFactory, db_url: str) -> None:
    lab = await serve_lab(1)
    first = await lab.serve()
    refused = [await lab.spawn_server()]
    if db_url.startswith("sqlite"):
        refused.append(await lab.spawn_server("--socket", str(lab.run_dir / "b" / "fleet.sock")))
    # stopped by the fixture (recorded pids) should one of them not exit as it must
    lab.servers += [ServerProcess(process, lab.socket_path) for process in refused]
    for process in refused:
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 2, stderr
        assert f"another fleet serve (pid {first.pid}) is already running" in stderr.decode()
    assert (await _raw(first.socket_path, "GET", "/v1/status"))[0] == 200  # untouched

    assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
    assert first.socket_path.exists()  # a dead server leaves its socket behind
    second = await lab.serve()
    assert (await _raw(second.socket_path, "GET", "/v1/whoami"))[1]["server_pid"] == second.pid


async def test_sigterm_removes_the_socket_and_tasks_keep_running(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    script = lab.cli.home / "sleep.py"
    script.write_text(SLEEPER)
    server = await lab.serve()
    started = await lab.run("--json", "dispatch", "--detach", str(script),
                            env={"FLEET_SERVER": "local"})
    assert started.returncode == 0, started.stderr
    task_id = int(json.loads(started.stdout)["task_id"])
    async with lab.remote(server) as remote:
        for _ in range(100):
            row = await remote.task(task_id)
            if row.state == "running" and row.remote_pid:
                break
            await asyncio.sleep(0.1)
    assert row.state == "running" and row.remote_pid is not None

    assert await server.stop(signal.SIGTERM) == 0
    assert not server.socket_path.exists()
    assert group_alive(row.remote_pid)
    assert "tasks keep running" in await server.stderr()
    again = await lab.serve()
    await wait_ready(again)
    async with lab.remote(again) as remote:
        assert (await remote.task(task_id)).state == "running"


async def test_ten_watchers_share_one_probe_per_host(serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(2, 1)
    server = await lab.serve()
    before = {handle.spec.name: list(handle.host.started_pids) for handle in lab.hosts}

    async def watcher() -> list[float]:
        seen: list[float] = []
        async with lab.remote(server) as remote:
            async for snapshot in remote.watch():
                assert [host.spec.name for host in snapshot.hosts] == ["gpu1", "gpu2"]
                seen.append(snapshot.taken_at)
                if len(seen) == 4:
                    return seen

    streams = await asyncio.wait_for(asyncio.gather(*(watcher() for _ in range(10))), 60)

    assert all(len(seen) == 4 and seen == sorted(seen) for seen in streams)
    after = {handle.spec.name: list(handle.host.started_pids) for handle in lab.hosts}
    assert after == before  # no watcher started a probe: the server's one stream serves all
    for name, pids in after.items():
        live = [pid for pid in pids if group_alive(pid)]
        assert len(live) == 1, (name, pids)  # exactly one probe process per host


async def test_status_right_after_start_waits_for_the_first_readings(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1, 1)
    process = await lab.spawn_server()
    lab.servers.append(ServerProcess(process, lab.socket_path))
    for _ in range(300):  # as soon as the socket is there, ask
        if lab.socket_path.exists():
            break
        await asyncio.sleep(0.05)
    async with open_remote(lab.socket_path) as remote:
        statuses = await remote.status()
    assert [(s.spec.name, s.state) for s in statuses] == [("gpu1", "up"), ("gpu2", "up")]
