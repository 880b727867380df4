"""A drain set through the services shows in the running monitor's snapshots at once, which
placement places from, not at the monitor's next flush."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.sim.build import SimTools
from fleet.snapshot import FleetSnapshot
from fleet.ssh.options import SshOptions
from tests.fixtures.sshserver import SimSshHostFactory
from tests.services.test_one_way_in import _gpu_host


def _drains(snapshot: FleetSnapshot | None) -> tuple[str | None, dict[int, str | None]]:
    """The host's drain reason and each drained GPU's, as the snapshot shows them."""
    assert snapshot is not None
    (host,) = snapshot.hosts
    return (host.drain_reason if host.drained else None,
            {gpu.index: gpu.drain_reason for gpu in host.gpus if gpu.drained})


async def monitored_box(tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
                        sim_ssh_options: SshOptions) -> Fleet:
    """A Fleet on tmp_path/fleet.db whose monitor watches one simulated 2-GPU host "box" and has
    read both GPUs; it never flushes in a test's time (only a refresh shows a stored drain).
    The caller stops the monitor and closes the Fleet."""
    box = await _gpu_host(sim_ssh_host, sim_tools, tmp_path, "box", 2)
    inventory = Inventory(hosts=(box.spec,), path=None, groups={}, settings={},
                          settings_line=None)
    fleet = Fleet(open_database(str(tmp_path / "fleet.db")), inventory,
                  dataclasses.replace(sim_ssh_options, accept_new=True))
    settings = fleet.monitor_settings().with_values("monitor", interval=0.2, flush_interval=600)
    try:
        await fleet.monitor_service.start_monitor(settings=settings)
        async with asyncio.timeout(30):
            while True:
                snapshot = fleet.monitor_service.snapshot()
                if snapshot is not None and len(snapshot.hosts[0].gpus) == 2:
                    return fleet
                await asyncio.sleep(0.1)
    except BaseException:
        await fleet.monitor_service.stop_monitor()
        fleet.close()
        raise


async def test_drains_show_in_the_live_snapshot_without_waiting_for_a_flush(
        tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
        sim_ssh_options: SshOptions) -> None:
    fleet = await monitored_box(tmp_path, sim_ssh_host, sim_tools, sim_ssh_options)
    try:
        await fleet.drain("box:1", "fan", by="test")
        assert _drains(fleet.monitor_service.snapshot()) == (None, {1: "fan"})
        await fleet.drain("box", "rack move", by="test")
        assert _drains(fleet.monitor_service.snapshot()) == ("rack move", {1: "fan"})
        await fleet.undrain("box:1", by="test")
        await fleet.undrain("box", by="test")
        assert _drains(fleet.monitor_service.snapshot()) == (None, {})
    finally:
        await fleet.monitor_service.stop_monitor()
        fleet.close()
