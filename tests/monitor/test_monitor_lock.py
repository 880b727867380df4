"""One recorder per database: a second `fleet monitor` on the same database is refused, naming
the first, on SQLite (a flock'd file) and PostgreSQL (the advisory lock); the lock goes with its
holder, even when SIGKILLed."""

from __future__ import annotations

import signal

import pytest

from fleet.sim import gpus as sim
from tests.fixtures.cli import FleetCli
from tests.monitor.conftest import GpuHostFactory, wait_until
from tests.monitor.test_monitor_cli import MonitorProcess, write_inventory


@pytest.mark.usefixtures("db_url")  # on each backend
async def test_a_second_monitor_on_one_database_is_refused_until_the_first_is_gone(
        fleet_cli: FleetCli, gpu_hosts: GpuHostFactory) -> None:
    write_inventory(fleet_cli, [await gpu_hosts("lk0", sim.busy(1, host="lk0"))])
    first = await MonitorProcess.start(fleet_cli)
    await wait_until(lambda: sum(s["samples_written"] for s in first.summaries) > 0, 30,
                     "samples written")

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
