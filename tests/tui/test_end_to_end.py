"""The TUI on the real service: the demo's simulated hosts over real SSH, the shipped probe,
the real database and monitor (or status polling), through tui.adapter.FleetAdapter."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleet.demo import DEMO_HOSTS, demo_fleet, demo_ssh_options, write_demo_scripts
from fleet.service import open as open_fleet
from tests.tui.conftest import settle
from tui.adapter import FleetAdapter
from tui.app import FleetApp
from tui.screens.host_detail import GpuPanel, HostDetailScreen
from tui.screens.tasks import TasksScreen
from tui.widgets.fleet_table import FleetTable

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0


async def test_real_fleet_shows_hosts_detail_history_and_tasks(tmp_path: Path) -> None:
    async with demo_fleet(tmp_path) as (inventory, database, ssh_dir), open_fleet(
            str(database), inventory, ssh_options=demo_ssh_options(ssh_dir)) as service:
        scripts = write_demo_scripts(tmp_path / "scripts")
        app = FleetApp(FleetAdapter(service, scripts=scripts, poll_interval_s=1.0))
        async with app.run_test(size=(120, 36)) as pilot:
            deadline = time.monotonic() + DEADLINE_S
            table = app.screen.query_one(FleetTable)
            names = {name for name, *_ in DEMO_HOSTS}
            while time.monotonic() < deadline:
                await pilot.pause(0.25)
                up = {k for k in table._order if str(table.get_cell(k, "state")) != "unknown"}
                if names <= up and app.snapshots_seen >= 2:
                    break
            assert names <= set(table._order), table._order
            assert str(table.get_cell("atlas", "gpus")).endswith("/8")
            assert str(table.get_cell("fornax", "gpus")) == "0"  # a host without GPUs
            table.move_cursor(row=table._order.index("atlas"))
            await pilot.press("enter")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, HostDetailScreen)
            while time.monotonic() < deadline and not screen.history:
                await pilot.pause(0.25)
                screen.load_history()
                await settle(pilot)
            assert sorted(screen.history) == list(range(8))  # history read back from the DB
            assert len(list(screen.query(GpuPanel))) == 8
            await pilot.press("escape", "t")
            await settle(pilot)
            assert isinstance(app.screen, TasksScreen)
            await pilot.press("q")
