"""The TUI on the real service: the demo's simulated hosts over real SSH, the shipped probe,
the real database and monitor, through tui.adapter.FleetAdapter; quitting the demo leaves no
task process behind."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from fleet.demo import DEMO_HOSTS, demo_session
from tests.tui.conftest import settle
from tui.adapter import FleetAdapter
from tui.app import FleetApp
from tui.screens.dispatch import DispatchScreen
from tui.screens.host_detail import GpuPanel, HostDetailScreen
from tui.screens.tasks import TasksScreen
from tui.widgets.fleet_table import FleetTable

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0


async def wait_until(pilot: Pilot[None], ready: Callable[[], Awaitable[bool]],
                     what: str, deadline_s: float = DEADLINE_S) -> None:
    """Let the app run until `ready()` holds; fail naming `what` after the deadline."""
    deadline = time.monotonic() + deadline_s
    while not await ready():
        assert time.monotonic() < deadline, f"not within {deadline_s:g}s: {what}"
        await pilot.pause(0.25)


def group_members(pgid: int, command_part: str | None = None) -> list[str]:
    """Live (not zombie) processes of process group `pgid`, or whose command line contains
    `command_part`, as "pid command" lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        mine = int(fields[2]) == pgid or (command_part is not None and command_part in command)
        if mine and fields[0] != "Z":
            found.append(f"{entry.name} {command}")
    return found


async def test_real_fleet_shows_hosts_detail_history_and_tasks(tmp_path: Path) -> None:
    async with demo_session(tmp_path / "demo") as session:
        app = FleetApp(FleetAdapter(session.fleet, scripts=session.scripts))
        async with app.run_test(size=(120, 36)) as pilot:
            table = app.screen.query_one(FleetTable)
            names = {name for name, *_ in DEMO_HOSTS}

            async def all_reported() -> bool:
                up = {k for k in table._order if str(table.get_cell(k, "state")) != "unknown"}
                return names <= up and app.snapshots_seen >= 2

            await wait_until(pilot, all_reported, "every demo host reported")
            assert str(table.get_cell("atlas", "gpus")).endswith("/8")
            assert str(table.get_cell("fornax", "gpus")) == "0"  # a host without GPUs
            table.move_cursor(row=table._order.index("atlas"))
            await pilot.press("enter")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, HostDetailScreen)

            async def history_loaded() -> bool:
                screen.load_history()
                await settle(pilot)
                return bool(screen.history)

            await wait_until(pilot, history_loaded, "history read back from the database")
            assert sorted(screen.history) == list(range(8))
            assert len(list(screen.query(GpuPanel))) == 8
            await pilot.press("escape", "t")
            await settle(pilot)
            assert isinstance(app.screen, TasksScreen)
            await pilot.press("q")


async def test_quitting_the_demo_cancels_its_tasks_and_leaves_no_process(tmp_path: Path
                                                                         ) -> None:
    async with demo_session(tmp_path / "demo") as session:
        fleet = session.fleet
        app = FleetApp(FleetAdapter(fleet, scripts=session.scripts))
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_until(pilot, lambda: _true(app.snapshots_seen >= 2), "live snapshots")
            await pilot.press("d")
            await settle(pilot)
            dialog = app.screen
            assert isinstance(dialog, DispatchScreen)
            assert dialog.query_one("#script").value.endswith("train.py")  # type: ignore[attr-defined]

            async def previewed() -> bool:
                if dialog.preview is None or not dialog.preview.feasible:
                    dialog.ask_preview()
                    await settle(pilot)
                return dialog.preview is not None and dialog.preview.feasible

            await wait_until(pilot, previewed, "a feasible placement for train.py")
            await pilot.press("ctrl+s")  # no settle: the new task's log follower runs on
            await wait_until(pilot, lambda: _true(isinstance(app.screen, TasksScreen)),
                             "the tasks screen with the new task's log")
            assert isinstance(app.screen, TasksScreen)
            task_id = app.screen.followed
            assert task_id is not None

            async def running() -> bool:
                row = await fleet.task(task_id)
                return row.state == "running" and row.remote_pid is not None \
                    and bool(group_members(row.remote_pid))

            await wait_until(pilot, running, f"task {task_id} running with live processes")
            row = await fleet.task(task_id)
            pgid, task_dir = row.remote_pid, row.remote_dir
            assert pgid is not None and task_dir is not None
            members = group_members(pgid, task_dir)
            assert any("train.py" in line for line in members)
            assert any("wrapper.sh" in line for line in members)
            await pilot.press("q")
        assert app.return_code in (0, None)
    assert group_members(pgid, task_dir) == [], "task processes outlived the demo"


async def _true(value: bool) -> bool:
    return value
