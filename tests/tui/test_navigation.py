"""Navigating the TUI with keys: overview, expand, host detail, every screen, help, palette."""

from __future__ import annotations

from textual.widgets import Static

from tests.tui.conftest import settle
from tests.tui.fake_service import LONG_NAME, FakeService
from tui.app import FleetApp
from tui.screens.allocations import AllocationsScreen
from tui.screens.discovery import DiscoveryScreen
from tui.screens.events import EventsScreen
from tui.screens.help import HelpScreen
from tui.screens.host_detail import GpuPanel, HostDetailScreen
from tui.screens.overview import OverviewScreen
from tui.screens.tasks import TasksScreen
from tui.widgets.fleet_table import FleetTable
from tui.widgets.history_plot import HistoryPlot
from tui.widgets.keyed_table import KeyedTable


def table_keys(app: FleetApp) -> list[str]:
    return list(app.screen.query_one(FleetTable)._order)


async def test_overview_lists_every_host_and_expands_to_gpus(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert table_keys(app) == [LONG_NAME, "atlas", "boreas", "cygnus", "draco", "eridanus",
                                   "fornax"]
        await pilot.press("down", "space")  # expand atlas
        await settle(pilot)
        assert table_keys(app)[1:10] == ["atlas"] + [f"atlas:{i}" for i in range(8)]
        assert app.screen.query_one(FleetTable).selected_key == "atlas"
        await pilot.press("left")
        await settle(pilot)
        assert "atlas:0" not in table_keys(app)


async def test_enter_opens_host_detail_with_history_and_escape_returns(
        app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "enter")  # boreas
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostDetailScreen)
        assert screen.host_name == "boreas"
        assert ("history", "boreas", 15 * 60) in fake.calls
        panels = list(screen.query(GpuPanel))
        assert [p.gpu_key for p in panels] == [f"boreas:{i}" for i in range(4)]
        assert any(v for v in panels[0].query_one(".plot-util", HistoryPlot).values)
        title = str(screen.query_one("#detail-title", Static).render())
        assert "boreas" in title and "15 min" in title
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert ("history", "boreas", 60 * 60) in fake.calls
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)


async def test_letter_keys_switch_between_every_screen(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for key, screen_type, rows in (("t", TasksScreen, 3), ("a", AllocationsScreen, 3),
                                       ("e", EventsScreen, 5), ("v", DiscoveryScreen, 2)):
            await pilot.press(key)
            await settle(pilot)
            assert isinstance(app.screen, screen_type)
            assert app.screen.query_one(KeyedTable).row_count == rows
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)


async def test_help_screen_lists_keys_and_closes(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        assert "free GPUs only" in str(app.screen.query_one(Static).render())
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)


async def test_palette_offers_every_action_of_the_screen(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Show tasks", "Show events", "Dispatch a task", "Drain / undrain",
                "Reserve GPU(s)", "Toggle free GPUs only", "Help: key bindings"} <= titles
        assert "Cancel task" not in titles
        await pilot.press("t")
        await settle(pilot)
        assert "Cancel task" in {c.title for c in app.get_system_commands(app.screen)}


async def test_sort_and_filters_change_rows_and_summary(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("s")  # util: busiest first
        await settle(pilot)
        assert table_keys(app)[0] == "boreas"
        await pilot.press("g")  # free GPUs only (boreas's GPUs are busy with memory in use)
        await settle(pilot)
        assert set(table_keys(app)) == {"atlas", "cygnus", LONG_NAME}
        await pilot.press("g", "slash")
        await pilot.press(*"@a100", "enter")
        await settle(pilot)
        assert sorted(table_keys(app)) == ["boreas", "eridanus"]
        summary = str(app.screen.query_one("#summary", Static).render())
        assert "filter: @a100" in summary and "sort: util" in summary
        await pilot.press("escape")
        await settle(pilot)
        assert len(table_keys(app)) == 7
