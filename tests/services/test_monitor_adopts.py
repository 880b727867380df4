"""A running monitor starts watching a host adopted after it started (by this or any process)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import TypeAlias

import pytest
from sqlalchemy import func, select

from db.models import Gpu, GpuSample, Host
from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.sim.build import SimTools
from fleet.snapshot import FleetSnapshot
from fleet.ssh.options import SshOptions
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory
from tests.services.test_one_way_in import _gpu_host

Lab: TypeAlias = tuple[SimHostHandle, Inventory, SshOptions]


@pytest.fixture
async def lab(tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
              sim_ssh_options: SshOptions) -> Lab:
    """Host `listed` (1 GPU) in the inventory and host `later` (2 GPUs) to adopt; the options
    log in to both and pin `listed`'s key on first use (`adopt` pins `later`'s)."""
    listed = await _gpu_host(sim_ssh_host, sim_tools, tmp_path, "listed", 1)
    later = await _gpu_host(sim_ssh_host, sim_tools, tmp_path, "later", 2)
    ssh_config = tmp_path / "ssh_config"  # adopted hosts authenticate like `ssh` would
    ssh_config.write_text(f"Host 127.0.0.1\n  IdentityFile {later.spec.identity_file}\n")
    options = dataclasses.replace(sim_ssh_options, ssh_config_files=(ssh_config,),
                                  accept_new=True)
    inventory = Inventory(hosts=(listed.spec,), path=None, groups={}, settings={},
                          settings_line=None)
    return later, inventory, options


def _gpus_shown(snapshot: FleetSnapshot) -> dict[str, int]:
    return {host.spec.name: len(host.gpus) for host in snapshot.hosts if host.state == "up"}


def _samples_of(database_path: Path, name: str) -> int:
    database = open_database(str(database_path))
    try:
        with database.session() as session:
            return session.scalar(
                select(func.count()).select_from(GpuSample)
                .join(Gpu, Gpu.id == GpuSample.gpu_id).join(Host, Host.id == Gpu.host_id)
                .where(Host.name == name)) or 0
    finally:
        database.close()


async def test_a_host_adopted_by_another_process_is_watched_and_recorded(
        tmp_path: Path, lab: Lab) -> None:
    later, inventory, options = lab
    database_path = tmp_path / "fleet.db"
    watching = Fleet(open_database(str(database_path)), inventory, options)
    adopting = Fleet(open_database(str(database_path)), inventory, options)  # another process
    snapshots = watching.watch()
    try:
        async with asyncio.timeout(30):
            async for snapshot in snapshots:
                if _gpus_shown(snapshot) == {"listed": 1}:
                    break
        await adopting.adopt(f"127.0.0.1:{later.port}", name="later", accept_new=True,
                             user=later.spec.user)
        async with asyncio.timeout(30):  # the monitor looks for new hosts every 5 s
            async for snapshot in snapshots:
                if _gpus_shown(snapshot) == {"listed": 1, "later": 2}:
                    break
        monitor = watching.monitor
        assert monitor is not None
        assert [spec.name for spec in monitor.specs] == ["listed", "later"]
        async with asyncio.timeout(30):  # and its readings are recorded like any host's
            while await asyncio.to_thread(_samples_of, database_path, "later") < 2:
                await asyncio.sleep(0.2)
        assert await monitor.add_hosts(monitor.specs) == ()  # watched once, never twice
    finally:
        await snapshots.aclose()
        watching.close()
        adopting.close()


async def test_a_monitor_of_a_pattern_leaves_out_adopted_hosts_it_does_not_select(
        tmp_path: Path, lab: Lab) -> None:
    later, inventory, options = lab
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), inventory, options)
    try:
        monitor = await fleet.monitor_service.start_monitor("listed")
        await fleet.adopt(f"127.0.0.1:{later.port}", name="later", accept_new=True,
                          user=later.spec.user)
        passes = monitor.housekeeping_passes
        async with asyncio.timeout(30):  # two housekeeping passes after the adoption
            while monitor.housekeeping_passes < passes + 2:
                await asyncio.sleep(0.2)
        assert [spec.name for spec in monitor.specs] == ["listed"]
        assert [spec.name for spec in fleet.hosts()] == ["listed", "later"]
    finally:
        await fleet.monitor_service.stop_monitor()
        fleet.close()
