"""`fleet monitor` beside a running `fleet serve` on the same database is refused (the server
records it already), on SQLite and PostgreSQL; `fleet serve --status` names whichever records
it; a server refuses a running monitor's SQLite database, and waits for it on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

import pytest

from tests.server.conftest import ServeLab, ServeLabFactory, ServerProcess

LOCAL = {"FLEET_SERVER": "local"}


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_a_monitor_is_refused_while_a_server_records_the_database(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()

    monitor = await lab.run("monitor", "--accept-new", env=LOCAL)

    assert monitor.returncode == 2, monitor.stdout + monitor.stderr
    assert "fleet serve" in monitor.stderr and f"pid {server.process.pid}" in monitor.stderr
    assert "stop it first" in monitor.stderr and "Traceback" not in monitor.stderr
    assert server.process.returncode is None
    status = await lab.run("--json", "status")  # the server answers on
    assert status.returncode == 0, status.stderr


async def _controllers(lab: ServeLab) -> tuple[int, list[tuple[str, int | None]]]:
    shown = await lab.run("--json", "serve", "--status", env=LOCAL)
    assert shown.returncode in (0, 9), shown.stderr
    return shown.returncode, [(c["role"], c["pid"])
                              for c in json.loads(shown.stdout)["controllers"]]


async def _until_controllers(lab: ServeLab, wanted: list[tuple[str, int | None]],
                             bound_s: float = 30) -> int:
    deadline = time.monotonic() + bound_s
    while True:
        code, found = await _controllers(lab)
        if found == wanted:
            return code
        assert time.monotonic() < deadline, f"controllers {found}, not {wanted}"
        await asyncio.sleep(0.2)


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_serve_status_names_the_server_or_the_monitor_that_records(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    assert await _until_controllers(lab, [("leader", server.process.pid)]) == 0
    assert await server.stop() == 0

    monitor = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet.cli.main", "monitor", "-q", cwd=lab.cli.home,
        env=lab.cli.env(lab.env(LOCAL)), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        # A monitor records the database, and no server leads it: exit 9.
        assert await _until_controllers(lab, [("monitor", monitor.pid)]) == 9
        if lab.cli.db_url is None or lab.cli.db_url.startswith("sqlite"):
            refused = await lab.spawn_server()
            assert await asyncio.wait_for(refused.wait(), 60) == 2
            assert refused.stderr is not None
            said = (await refused.stderr.read()).decode()
            assert f"another fleet monitor (pid {monitor.pid}) is already running" in said
        else:  # PostgreSQL: the server waits as the standby, and leads once the monitor stops
            standby = ServerProcess(await lab.spawn_server(), lab.socket_path)
            lab.servers.append(standby)
            await _until_controllers(lab, [("monitor", monitor.pid), ("standby", standby.pid)])
            monitor.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(monitor.wait(), 30) == 0
            assert await _until_controllers(lab, [("leader", standby.pid)]) == 0
    finally:
        if monitor.returncode is None:
            monitor.kill()
        await monitor.wait()
