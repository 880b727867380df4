"""The monitor against SimSshHost hosts (real asyncssh server, real probe, simulated NVML)."""

from __future__ import annotations

import asyncio
import os
import signal

from sqlalchemy import func, select

from db.engine import Database
from db.models import Event, GpuSample, Host
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.sim import gpus as sim
from fleet.sim.gpus import write_config
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import GpuHostFactory, relayed, wait_until


def _gpu_samples_per_host(database: Database) -> dict[str, int]:
    from db.models import Gpu

    with database.session() as session:
        rows = session.execute(
            select(Host.name, func.count(GpuSample.id))
            .join(Gpu, Gpu.host_id == Host.id)
            .join(GpuSample, GpuSample.gpu_id == Gpu.id)
            .group_by(Host.name)
        )
        return {name: count for name, count in rows}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_one_connection_and_one_probe_per_host_record_every_gpu(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    hosts = [await gpu_hosts(f"h{i}", sim.mixed(4 if i else 2, host=f"h{i}")) for i in range(3)]
    monitor = Monitor([h.spec for h in hosts], database, sim_ssh_options, fast_settings)
    monitors.append(monitor)
    await monitor.start()
    await wait_until(
        lambda: all(s.reports >= 5 for s in monitor.stream_stats().values()), 20,
        "5 readings from every host",
    )
    # one connection and one session (the probe) per host, over many intervals
    for host in hosts:
        assert len(host.host.connections) == 1
        assert len(host.host.started_pids) == 1
    probe_pids = [host.host.started_pids[0] for host in hosts]
    await monitor.stop()
    counts = _gpu_samples_per_host(database)
    assert counts["h0"] >= 2 * 5 and counts["h1"] >= 4 * 5 and counts["h2"] >= 4 * 5
    # the probes exited on their own (stdin closed), none left behind
    await wait_until(lambda: not any(_alive(pid) for pid in probe_pids), 5, "probes to exit")
    snapshot = monitor.snapshot()
    assert snapshot is not None
    assert [len(h.gpus) for h in snapshot.hosts] == [2, 4, 4]


async def test_live_change_shows_in_next_snapshot(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("live", sim.idle(2, host="live"))
    monitor = Monitor([host.spec], database, sim_ssh_options, fast_settings)
    monitors.append(monitor)
    await monitor.start()
    updates = monitor.subscribe()
    first = await asyncio.wait_for(anext(updates), 10)
    assert first.hosts[0].spec.name == "live"
    hot = sim.idle(2, host="live")
    hot.gpus[1].temperature_c = 77
    write_config(host.config_path, hot)

    async def temperature_seen() -> None:
        async for snapshot in updates:
            gpus = snapshot.hosts[0].gpus
            if len(gpus) == 2 and gpus[1].reading.temperature_c == 77:
                return

    await asyncio.wait_for(temperature_seen(), 10)
    await updates.aclose()


async def test_host_down_then_back(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    relay, spec = await relayed(await gpu_hosts("flaky", sim.idle(1, host="flaky")),
                                sim_ssh_options)
    monitor = Monitor([spec], database, sim_ssh_options, fast_settings)
    monitors.append(monitor)
    await monitor.start()

    def state() -> str:
        snapshot = monitor.snapshot()
        return snapshot.hosts[0].state if snapshot else "none"

    try:
        await wait_until(lambda: state() == "up", 15, "host up")
        await relay.stop()
        await wait_until(lambda: state() == "down", 10, "host down")
        await relay.start()
        await wait_until(lambda: state() == "up", 15, "host back up")
        await monitor.stop()
    finally:
        await relay.stop()
    with database.session() as session:
        kinds = [e.kind for e in session.scalars(select(Event).order_by(Event.id))]
        stored_state = session.scalar(select(Host.state).where(Host.name == "flaky"))
    assert kinds.count("host_down") == 1 and kinds.count("host_up") == 1, kinds
    assert kinds.index("host_down") < kinds.index("host_up")
    assert stored_state == "up"


async def test_stalled_probe_is_restarted(
    gpu_hosts: GpuHostFactory, database: Database, sim_ssh_options: SshOptions,
    fast_settings: Settings, monitors: list[Monitor],
) -> None:
    host = await gpu_hosts("stall", sim.idle(1, host="stall"))
    settings = fast_settings.with_values("monitor", stall_intervals=3)
    monitor = Monitor([host.spec], database, sim_ssh_options, settings)
    monitors.append(monitor)
    await monitor.start()
    stats = monitor.stream_stats()["stall"]
    await wait_until(lambda: stats.reports >= 2, 15, "first readings")
    first_probe = host.host.started_pids[0]
    os.kill(first_probe, signal.SIGSTOP)
    await wait_until(lambda: stats.stalls == 1 and stats.probes_started == 2, 10, "a restart")
    reports = stats.reports
    await wait_until(lambda: stats.reports >= reports + 2, 10, "readings from the new probe")
    await wait_until(lambda: not _alive(first_probe), 5, "the stalled probe killed")
    assert len(host.host.connections) == 1
