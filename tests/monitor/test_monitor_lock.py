"""One recorder per database: a second `fleet monitor` on the same database is refused, naming
the first, on SQLite (a flock'd file) and PostgreSQL (the advisory lock); the lock goes with its
holder, even when SIGKILLed. On PostgreSQL a monitor whose lock session ended takes the lock
again, or stops (exit 4) when another process took it meanwhile."""

from __future__ import annotations

import asyncio
import signal
import socket
import time

import pytest

from db.serve_lock import SERVE_LOCK_KEY
from fleet.sim import gpus as sim
from tests.fixtures.cli import FleetCli
from tests.fixtures.database import PgServer
from tests.monitor.conftest import GpuHostFactory, wait_until
from tests.monitor.test_monitor_cli import MonitorProcess, write_inventory


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_a_second_monitor_on_one_database_is_refused_until_the_first_is_gone(
        fleet_cli: FleetCli, gpu_hosts: GpuHostFactory) -> None:
    first = await _recording(fleet_cli, gpu_hosts, "lk0", {})

    second = await fleet_cli.run("--json", "monitor", "--accept-new", timeout=30)

    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stdout == ""
    assert "fleet monitor" in second.stderr and f"pid {first.process.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert first.process.returncode is None  # the first one records on
    code, _ = await first.finish(signal.SIGKILL)
    assert code == -signal.SIGKILL

    third = await MonitorProcess.start(fleet_cli)  # the kernel (or the server) freed the lock
    await wait_until(lambda: sum(s["samples_written"] for s in third.summaries) > 0, 30,
                     "samples written after the first monitor died")
    code, stderr = await third.finish(signal.SIGTERM)
    assert code == 0, stderr


def _terminate_monitor_session(pg_server: PgServer, name: str, pid: int) -> int:
    """End the monitor's lock session on the server, as a database restart would; how many."""
    return len(pg_server.admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND "
        "application_name = %s", (name, f"fleet monitor pid {pid} on {socket.gethostname()}"),
    ).fetchall())


def _lock_holder(pg_server: PgServer, name: str) -> str | None:
    import psycopg

    with psycopg.connect(pg_server.cluster.dsn(name)) as connection:
        row = connection.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objid = %s AND l.database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())",
            (SERVE_LOCK_KEY,)).fetchone()
    return None if row is None else str(row[0])


async def _recording(fleet_cli: FleetCli, gpu_hosts: GpuHostFactory, host: str,
                     env: dict[str, str]) -> MonitorProcess:
    """A `fleet monitor` of one host on the database in `env`, once it has written samples."""
    write_inventory(fleet_cli, [await gpu_hosts(host, sim.busy(1, host=host))])
    monitor = await MonitorProcess.start(fleet_cli, env=env)
    await wait_until(lambda: sum(s["samples_written"] for s in monitor.summaries) > 0, 30,
                     "samples written")
    return monitor


async def test_a_monitor_takes_its_lock_again_after_its_session_ends(
        fleet_cli: FleetCli, gpu_hosts: GpuHostFactory, pg_server: PgServer,
        pg_database: str) -> None:
    env = {"FLEET_DB": pg_server.cluster.url(pg_database)}
    first = await _recording(fleet_cli, gpu_hosts, "lk1", env)
    mine = f"fleet monitor pid {first.process.pid} on {socket.gethostname()}"
    assert await asyncio.to_thread(_lock_holder, pg_server, pg_database) == mine
    assert await asyncio.to_thread(_terminate_monitor_session, pg_server, pg_database,
                                   first.process.pid) >= 1
    deadline = time.monotonic() + 30
    while await asyncio.to_thread(_lock_holder, pg_server, pg_database) != mine:
        assert time.monotonic() < deadline, "the monitor never took its lock again"
        await asyncio.sleep(0.2)

    second = await fleet_cli.run("monitor", "--accept-new", env=env, timeout=30)

    assert second.returncode == 2, second.stderr
    assert f"{mine} is already recording" in second.stderr
    code, stderr = await first.finish(signal.SIGTERM)
    assert code == 0, stderr
    assert "took the recorder lock of" in stderr


async def test_a_monitor_whose_lock_was_taken_meanwhile_stops_with_exit_4(
        fleet_cli: FleetCli, gpu_hosts: GpuHostFactory, pg_server: PgServer,
        pg_database: str) -> None:
    import psycopg

    env = {"FLEET_DB": pg_server.cluster.url(pg_database)}
    first = await _recording(fleet_cli, gpu_hosts, "lk2", env)
    other = psycopg.connect(pg_server.cluster.dsn(pg_database), autocommit=True,
                            application_name="fleet monitor pid 999999 on elsewhere")
    try:
        for _ in range(10):  # bounded: the monitor checks its lock only every few seconds
            _terminate_monitor_session(pg_server, pg_database, first.process.pid)
            row = other.execute("SELECT pg_try_advisory_lock(%s)", (SERVE_LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("could not take the lock from the monitor")
        code = await asyncio.wait_for(first.process.wait(), 60)  # it stops on its own
        assert first.process.stderr is not None
        stderr = (await first.process.stderr.read()).decode()
    finally:
        other.close()
    assert code == 4, stderr
    assert ("fleet monitor pid 999999 on elsewhere took this database's recorder lock while "
            "this monitor's database session was gone; stopped recording") in stderr
