"""`fleet monitor` beside a running `fleet serve` on the same database is refused (the server
records it already), on SQLite and PostgreSQL; on SQLite a server refuses a running monitor's
database the same way."""

from __future__ import annotations

import pytest

from tests.server.conftest import ServeLabFactory

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
