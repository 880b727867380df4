"""Every operator action through the keyboard: drain, undrain, reserve, release, cancel,
dispatch (with preview) and adopt (with fingerprint confirmation); errors shown, not raised."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from textual.widgets import Button, Footer, Input, Log, Static
from textual.widgets._footer import FooterKey

from fleet.errors import ConfigError, StorageError
from fleet.placement.request import MemorySize
from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.dispatch import DispatchScreen, parse_min_free_memory
from tui.screens.help import HELP_TEXT
from tui.screens.overview import OverviewScreen
from tui.screens.tasks import TasksScreen
from tui.widgets.fleet_table import FleetTable
from tui.widgets.keyed_table import KeyedTable


def cell(app: FleetApp, row: str, column: str) -> str:
    return str(app.screen.query_one(FleetTable).get_cell(row, column))


async def test_drain_asks_then_drains_and_the_row_shows_it(app: FleetApp, fake: FakeService
                                                           ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "down", "n")  # cygnus
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Drain cygnus?"
        await pilot.press("y")
        await settle(pilot)
        assert ("drain", "cygnus", None) in fake.calls
        assert cell(app, "cygnus", "state") == "DRAINED"


async def test_declining_the_confirmation_changes_nothing(app: FleetApp, fake: FakeService
                                                          ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "down", "n", "n")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert not [c for c in fake.calls if c[0] == "drain"]


async def test_undrain_a_drained_host(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press(*["down"] * 5, "n")  # eridanus (drained)
        await settle(pilot)
        assert app.screen.question == "Undrain eridanus?"  # type: ignore[attr-defined]
        await pilot.press("y")
        await settle(pilot)
        assert ("undrain", "eridanus", None) in fake.calls
        assert cell(app, "eridanus", "state") == "up"


async def test_drain_one_gpu_from_its_row(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "space", "down", "down", "n", "y")  # boreas GPU 1
        await settle(pilot)
        assert ("drain", "boreas", 1) in fake.calls
        assert cell(app, "boreas:1", "state") == "DRAINED"


async def test_reserve_free_gpus_of_a_host_then_release_on_allocations(
        app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "down", "r")  # cygnus: 2 free GPUs
        await settle(pilot)
        assert "cygnus GPU 0, 1" in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("y")
        await settle(pilot)
        assert ("reserve", "cygnus", (0, 1)) in fake.calls
        await pilot.press("a")
        await settle(pilot)
        table = app.screen.query_one(KeyedTable)
        assert {"100", "101"} <= set(table.rows_by_key)
        table.move_cursor(row=list(table.rows_by_key).index("100"))
        await pilot.press("x", "y")
        await settle(pilot)
        assert ("release", 100) in fake.calls
        assert "100" not in table.rows_by_key


async def test_task_allocations_are_not_released_from_the_ui(app: FleetApp, fake: FakeService
                                                             ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        await pilot.press("x")  # first row is task 12's allocation
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert not [c for c in fake.calls if c[0] == "release"]


async def test_cancel_running_task_and_follow_its_log(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TasksScreen)
        log = screen.query_one("#task-log")
        assert "[task 12] step 4 loss 0.200" in "\n".join(log.lines)  # type: ignore[attr-defined]
        await pilot.press("x")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert ("cancel", 12) in fake.calls
        assert str(screen.query_one(KeyedTable).get_cell("12", "state")) == "cancelled"


async def test_dispatch_previews_then_submits(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("t", "d")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, DispatchScreen)
        assert dialog.query_one("#script", Input).value == "examples/train.py"
        assert dialog.query_one("#submit", Button).disabled
        dialog.query_one("#args", Input).value = "--epochs '3 4'"
        dialog.query_one("#gpus", Input).value = "2"
        dialog.query_one("#gpus", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        preview = str(dialog.query_one("#preview", Static).render())
        assert "would run on cygnus GPU 0, 1" in preview
        assert "excluded (3)" in preview and "eridanus: host drained" in preview
        assert "boreas:1: in use by 1 process not started by fleet" in preview
        assert not dialog.query_one("#submit", Button).disabled
        await pilot.click("#submit")
        await settle(pilot)
        assert ("dispatch", "examples/train.py", 2, ("--epochs", "3 4")) in fake.calls
        assert isinstance(app.screen, TasksScreen)
        assert "40" in app.screen.query_one(KeyedTable).rows_by_key


async def test_dispatch_without_placement_cannot_submit(app: FleetApp, fake: FakeService
                                                        ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        dialog = app.screen
        dialog.query_one("#gpus", Input).value = "8"
        dialog.query_one("#gpus", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        assert "no placement possible" in str(dialog.query_one("#preview", Static).render())
        assert dialog.query_one("#submit", Button).disabled
        assert not [c for c in fake.calls if c[0] == "dispatch"]


async def test_dispatch_failure_is_shown_and_the_dialog_stays(app: FleetApp, fake: FakeService
                                                              ) -> None:
    fake.fail_dispatch = True
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.click("#submit")
        await settle(pilot)
        assert isinstance(app.screen, DispatchScreen)
        assert "disk full" in str(app.screen.query_one("#preview", Static).render())


async def test_adopt_shows_the_fingerprint_before_adopting(app: FleetApp, fake: FakeService
                                                           ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert "SHA256:q0b3+fakeFingerprintForTests" in dialog.detail
        assert not [c for c in fake.calls if c[0] == "adopt"]
        await pilot.press("y")
        await settle(pilot)
        assert ("adopt", "10.0.0.77:22", "SHA256:q0b3+fakeFingerprintForTests0123456789a") \
            in fake.calls
        assert str(app.screen.query_one(KeyedTable).get_cell("10.0.0.77:22", "state")) \
            == "adopted"


class BrokenEvents(FakeService):
    async def events(self, limit: int = 500) -> list:  # type: ignore[type-arg]
        raise StorageError("cannot read events: database is locked")


async def test_a_failing_service_call_is_a_notification_not_a_crash() -> None:
    app = FleetApp(BrokenEvents(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        messages = [n.message for n in app._notifications]
        assert any("database is locked" in m for m in messages)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)


def test_min_free_memory_is_parsed_as_dispatch_parses_it() -> None:
    assert parse_min_free_memory("20G") == MemorySize(bytes=20 * 1024**3)
    assert parse_min_free_memory("512m") == MemorySize(bytes=512 * 1024**2)
    assert parse_min_free_memory("80%") == MemorySize(fraction=0.8)
    assert parse_min_free_memory(" ") is None
    with pytest.raises(ConfigError, match="min free mem 'lots'"):
        parse_min_free_memory("lots")


async def test_a_percentage_reaches_the_placement_request(app: FleetApp, fake: FakeService
                                                          ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, DispatchScreen)
        dialog.query_one("#min-mem", Input).value = "50%"
        assert dialog.request().min_free_memory == MemorySize(fraction=0.5)


async def test_ctrl_s_is_shown_in_the_dialog_its_footer_and_help(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, DispatchScreen)
        title = str(dialog.query_one(".dialog-title", Static).render())
        assert "Ctrl+S: submit" in title
        assert "Ctrl+S" in str(dialog.query_one("#submit", Button).label)
        footer = {(key.key, key.description) for key in dialog.query_one(Footer).query(FooterKey)}
        assert ("ctrl+s", "Submit") in footer
        assert "Ctrl+S" in HELP_TEXT and "Dispatch dialog" in HELP_TEXT


async def test_after_a_submit_the_new_tasks_log_opens(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("t", "enter")  # follow task 12 first: not what must open later
        await settle(pilot)
        await pilot.press("f", "d")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TasksScreen)
        assert screen.followed == 40
        assert "log of task 40" in str(screen.query_one("#log-title", Static).render())
        lines = screen.query_one("#task-log", Log).lines
        assert lines and all(line.startswith("[task 40]") for line in lines)
        assert screen.query_one(KeyedTable).selected_key == "40"


class NoHosts(FakeService):
    async def watch(self) -> AsyncIterator[FleetSnapshot]:
        raise ConfigError("no hosts to monitor: the inventory lists none and none are adopted")
        yield  # an async generator, as the real watch()


async def test_why_no_fleet_is_shown_stays_on_the_overview() -> None:
    app = FleetApp(NoHosts(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        summary = str(app.screen.query_one("#summary", Static).render())
        assert "not watching the fleet: no hosts to monitor" in summary
        await pilot.press("t", "f")  # away and back: the reason is still there, toast or not
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        summary = str(app.screen.query_one("#summary", Static).render())
        assert "not watching the fleet: no hosts to monitor" in summary
