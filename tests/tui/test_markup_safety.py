"""Names, reasons, messages and typed text from outside are shown as written, never read as
Textual markup: `[/]` (a closing tag with nothing to close) used to crash the whole app."""

from __future__ import annotations

from dataclasses import replace

import msgspec
from textual.pilot import Pilot
from textual.widgets import Input, Static

from fleet.errors import FleetError
from fleet.reports import ProcessInfo
from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import GIB, NOW, FakeService, standard_fleet
from tui.app import FleetApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.dispatch import DispatchScreen
from tui.screens.events import EventsScreen
from tui.screens.host_detail import HostDetailScreen
from tui.screens.overview import OverviewScreen
from tui.screens.tasks import TasksScreen
from tui.service import DispatchRequest, EventView, PlacementPreview
from tui.widgets.keyed_table import KeyedTable

HOSTILE = "x[/]y[red]"  # as markup: an error (nothing to close), then red text


def hostile_fleet() -> FleetSnapshot:
    """The standard fleet with a process on atlas GPU 0 and fornax's reason named HOSTILE."""
    snapshot = standard_fleet()
    hosts = list(snapshot.hosts)
    atlas = hosts[0]
    gpu0 = atlas.gpus[0]
    reading = msgspec.structs.replace(gpu0.reading, processes=(ProcessInfo(4242, GIB, HOSTILE),))
    hosts[0] = msgspec.structs.replace(
        atlas, gpus=(msgspec.structs.replace(gpu0, reading=reading), *atlas.gpus[1:]))
    fornax = next(i for i, h in enumerate(hosts) if h.spec.name == "fornax")
    hosts[fornax] = msgspec.structs.replace(hosts[fornax], reason=HOSTILE)
    return replace(snapshot, hosts=tuple(hosts))


class HostileService(FakeService):
    """Every text the screens show from outside holds HOSTILE; the preview fails naming it."""

    def __post_init__(self) -> None:
        self.snapshot = hostile_fleet()
        super().__post_init__()
        self.task_list[0] = replace(self.task_list[0], name=HOSTILE)

    def event_list(self) -> list[EventView]:
        return [EventView(7, NOW - 5, "warning", "hook_failed", f"hook said {HOSTILE}", "atlas")]

    async def preview(self, request: DispatchRequest) -> PlacementPreview:
        raise FleetError(f"no host matches {request.hosts!r}")


async def open_host(pilot: Pilot[None], app: FleetApp, name: str) -> None:
    """From the overview, the detail screen of host `name`."""
    screen = app.screen
    assert isinstance(screen, OverviewScreen)
    screen.table.move_cursor(row=screen.table._order.index(name))
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, HostDetailScreen) and app.screen.host_name == name


def shown(widget: Static) -> str:
    return str(widget.render())


async def test_outside_names_on_every_screen_are_shown_as_written() -> None:
    app = FleetApp(HostileService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        assert isinstance(app.screen, TasksScreen)
        table = app.screen.query_one(KeyedTable)
        assert str(table.get_cell("12", "name")) == HOSTILE
        await pilot.press("enter")  # follow its log: the title names it
        await settle(pilot)
        assert HOSTILE in shown(app.screen.query_one("#log-title", Static))
        await pilot.press("x")  # the confirmation names it too
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert HOSTILE in shown(app.screen.query_one(".dialog-title", Static))
        await pilot.press("n", "e")
        await settle(pilot)
        assert isinstance(app.screen, EventsScreen)
        assert str(app.screen.query_one(KeyedTable).get_cell("7", "message")).endswith(HOSTILE)
        await pilot.press("f")
        await settle(pilot)
        await open_host(pilot, app, "atlas")  # its process
        processes = app.screen.query_one("#processes")
        assert HOSTILE in str(processes.get_row_at(0)[-1])  # type: ignore[attr-defined]
    assert app.return_code in (None, 0)


async def test_a_host_reason_in_its_detail_is_shown_as_written() -> None:
    app = FleetApp(HostileService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await open_host(pilot, app, "fornax")
        texts = [shown(static) for static in app.screen.query(".muted").results(Static)]
        assert HOSTILE in texts


async def test_filters_are_shown_as_typed() -> None:
    app = FleetApp(FakeService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        for typed in ("[a-c]*", "[/]", "["):
            await pilot.press("slash")
            box = app.screen.query_one("#filter", Input)
            box.value = typed
            await pilot.press("enter")
            await settle(pilot)
            assert f"filter: {typed}  ·" in shown(app.screen.query_one("#summary", Static)) \
                or shown(app.screen.query_one("#summary", Static)).endswith(f"filter: {typed}")
        await pilot.press("e", "slash")
        app.screen.query_one("#events-filter", Input).value = "[/]"
        await pilot.press("enter")
        await settle(pilot)
        assert "filter (/): [/]  ·" in shown(app.screen.query_one("#events-title", Static))


async def preview_with(pilot: Pilot[None], app: FleetApp, field: str, typed: str) -> str:
    """The dispatch dialog's preview after typing `typed` into `field` (opened if need be)."""
    if not isinstance(app.screen, DispatchScreen):
        await pilot.press("d")
        await settle(pilot)
    dialog = app.screen
    assert isinstance(dialog, DispatchScreen)
    dialog.query_one(field, Input).value = typed
    dialog.query_one(field, Input).focus()
    await pilot.press("enter")
    await settle(pilot)
    return shown(dialog.query_one("#preview", Static))


async def test_an_error_naming_typed_text_is_a_notification_not_a_crash() -> None:
    app = FleetApp(HostileService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "no host matches '[/]'" in await preview_with(pilot, app, "#hosts", "[/]")
        assert any("no host matches '[/]'" in n.message for n in app._notifications)
    assert app.return_code in (None, 0)


async def test_the_gpu_count_is_checked_as_placement_checks_it() -> None:
    app = FleetApp(FakeService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        for typed in ("-", "0", "-1"):
            assert (f"GPUs must be a whole number of at least 1, not {typed!r}"
                    in await preview_with(pilot, app, "#gpus", typed))
