"""A PostgreSQL server that goes away mid-monitor: the monitor keeps a bounded buffer, says what
it drops, reconnects, and writes what it kept (needs the suite's PostgreSQL server)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from fleet.sim import gpus as sim
from tests.fixtures.cli import FleetCli
from tests.fixtures.database import PgServer
from tests.monitor.conftest import GpuHostFactory, wait_until
from tests.monitor.test_monitor_cli import FAST_SETTINGS, MonitorProcess

pytestmark = pytest.mark.slow


def _cut(server: PgServer, name: str) -> None:
    """No new connections to `name`, and every open one ended (as a server restart would)."""
    server.admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    server.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def _sample_count(server: PgServer, name: str) -> int:
    import psycopg

    with psycopg.connect(server.cluster.dsn(name)) as connection:
        row = connection.execute("SELECT count(*) FROM gpu_samples").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_vanished_database_costs_a_bounded_counted_buffer_then_writing_resumes(
        fleet_cli: FleetCli, gpu_hosts: GpuHostFactory, pg_server: PgServer,
        pg_database: str) -> None:
    hosts = [await gpu_hosts(f"o{i}", sim.busy(2, host=f"o{i}")) for i in range(2)]
    lines = ["hosts:"]
    for host in hosts:
        spec = host.spec
        lines += [f"  {spec.name}:", f"    address: {spec.address}", f"    port: {spec.port}",
                  f"    user: {spec.user}", f"    identity_file: {spec.identity_file}"]
    # flush_rows 3: the retry buffer holds 30 rows, a few seconds of 2 hosts' readings
    settings = FAST_SETTINGS.replace("    flush_interval: 0.2\n",
                                     "    flush_interval: 0.2\n    flush_rows: 3\n")
    assert "flush_rows" in settings
    (fleet_cli.home / "inventory.yaml").write_text("\n".join(lines) + "\n" + settings)
    env = {"FLEET_DB": pg_server.cluster.url(pg_database)}
    monitor = await MonitorProcess.start(fleet_cli, env=env)
    await wait_until(lambda: sum(s["samples_written"] for s in monitor.summaries) >= 8, 30,
                     "samples written")
    _cut(pg_server, pg_database)

    def dropping_with_a_full_buffer() -> bool:
        # A summary written while a failing flush is in flight counts its rows out of the
        # buffer (0 then): wait for one between flushes.
        last = monitor.summaries[-1]
        return last["readings_dropped"] > 0 and last["buffered"] > 0

    await wait_until(dropping_with_a_full_buffer, 30, "readings dropped once the buffer was full")
    during = monitor.summaries[-1]
    assert during["failed_flushes"] > 0 and during["buffered"] <= 30
    assert max(summary["buffered"] for summary in monitor.summaries) <= 30
    assert monitor.process.returncode is None  # the monitor lives on
    pg_server.admin.execute(f"ALTER DATABASE {pg_database} ALLOW_CONNECTIONS true")
    mark = len(monitor.summaries)
    await wait_until(lambda: sum(s["samples_written"] for s in monitor.summaries[mark:]) >= 8,
                     30, "writing resumed after the database came back")
    assert monitor.summaries[-1]["buffered"] <= 30
    code, stderr = await monitor.finish(signal.SIGTERM)
    assert code == 0, stderr
    assert "readings dropped while the database was unavailable" in stderr
    assert "cannot write" in stderr  # each refused write was logged
    written = sum(s["samples_written"] for s in monitor.summaries)
    assert await asyncio.to_thread(_sample_count, pg_server, pg_database) >= written
