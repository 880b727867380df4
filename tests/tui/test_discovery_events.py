"""Discovery (an empty list explained, scan, adopt by the confirmed key) and events (newest
first on screen, Enter shows the whole message), on the fake service and on a real Fleet."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Static

from db.events import add_event
from fleet.service import open as open_fleet
from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService
from tui.adapter import FleetAdapter
from tui.app import FleetApp
from tui.messages import EventsLoaded
from tui.screens.confirm import ConfirmScreen
from tui.screens.event_detail import EventDetailScreen
from tui.screens.events import EventsScreen
from tui.screens.host_detail import HostDetailScreen
from tui.service import CandidateView, EventView
from tui.widgets.keyed_table import KeyedTable

LONG_MESSAGE = ("hook failed: " + "x" * 240 + " END-OF-MESSAGE")


async def test_an_empty_discovery_list_explains_itself_and_s_scans() -> None:
    fake = FakeService()
    fake.candidate_list = []
    fake.scan_finds = [CandidateView("10.0.0.90:22", "gpu-found", "10.0.0.90", 22, "_fleet._tcp",
                                     last_seen=NOW)]
    app = FleetApp(fake, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        empty = app.screen.query_one("#discovery-empty", Static)
        text = str(empty.render())
        assert empty.display and "No candidates yet" in text
        assert "mDNS" in text and "_fleet._tcp" in text and "veth-lab" in text
        assert "Press s to scan" in text
        await pilot.press("s")
        await settle(pilot)
        assert ("scan",) in fake.calls
        assert "10.0.0.90:22" in app.screen.query_one(KeyedTable).rows_by_key
        assert not empty.display


async def test_adopt_passes_the_confirmed_key_and_shows_the_managed_name(
        app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert ("adopt", "10.0.0.77:22", "SHA256:q0b3+fakeFingerprintForTests0123456789a") \
            in fake.calls
        assert ("host_key", "10.0.0.77:22") in fake.calls
        assert len([c for c in fake.calls if c[0] == "host_key"]) == 1  # not fetched again
        messages = [n.message for n in app._notifications]
        assert any("as gpu-new-01" in m for m in messages), messages


class LongEvent(FakeService):
    async def events(self, limit: int = 500, *, host: str | None = None) -> list[EventView]:
        return [EventView(9, NOW - 5, "error", "hook_failed", LONG_MESSAGE, "atlas")]


async def events_table(pilot: Pilot[None]) -> KeyedTable:
    """The events screen's table, opened from wherever the app is."""
    await pilot.press("e")
    await settle(pilot)
    return pilot.app.screen.query_one(KeyedTable)


async def test_enter_on_an_event_shows_its_whole_message() -> None:
    app = FleetApp(LongEvent(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = await events_table(pilot)
        assert "END-OF-MESSAGE" not in str(table.get_cell("9", "message"))
        await pilot.press("enter")
        await settle(pilot)
        detail = app.screen
        assert isinstance(detail, EventDetailScreen)
        shown = str(detail.query_one("#event-message", Static).render())
        assert "END-OF-MESSAGE" in shown.replace("\n", "") and "hook_failed" in shown
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, EventsScreen)


async def test_events_on_a_real_fleet_are_newest_first_on_screen(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  atlas:\n    address: 127.0.0.1\n")
    async with open_fleet(str(tmp_path / "fleet.db"), inventory) as fleet:
        with fleet.database.session() as session:
            for ts, message in ((1000, "first"), (2000, "second"), (3000, "third")):
                add_event(session, ts=ts, kind="test", severity="info", message=message)
            session.commit()
        app = FleetApp(FleetAdapter(fleet), clock=lambda: NOW, watch_snapshots=False)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)
            table = await events_table(pilot)
            shown = [str(table.get_row_at(row)[-1]) for row in range(table.row_count)]
            assert shown == ["third", "second", "first"]


async def test_host_detail_shows_a_quiet_hosts_events_newest_first(tmp_path: Path) -> None:
    from db.hosts import sync_hosts
    from db.types import HostFacts

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  quiet:\n    address: 127.0.0.1\n"
                         "  busy:\n    address: 127.0.0.2\n")
    async with open_fleet(str(tmp_path / "fleet.db"), inventory) as fleet:
        with fleet.database.session() as session:
            ids = sync_hosts(session, [HostFacts("quiet", "127.0.0.1"),
                                       HostFacts("busy", "127.0.0.2")], now=500)
            for ts, message in ((1000, "quiet-first"), (2000, "quiet-second"),
                                (3000, "quiet-third")):
                add_event(session, ts=ts, kind="test", severity="info", message=message,
                          host_id=ids["quiet"])
            for number in range(300):  # every one newer than the quiet host's
                add_event(session, ts=10_000 + number, kind="test", severity="info",
                          message=f"busy-{number}", host_id=ids["busy"])
            session.commit()
        app = FleetApp(FleetAdapter(fleet), clock=lambda: NOW, watch_snapshots=False)
        async with app.run_test(size=(120, 50)) as pilot:
            await settle(pilot)
            await app.push_screen(HostDetailScreen("quiet"))
            await settle(pilot)
            shown = str(app.screen.query_one("#host-events", Static).render())
    lines = shown.splitlines()
    assert [line.split()[-1] for line in lines] == ["quiet-third", "quiet-second", "quiet-first"]
    assert "busy" not in shown


async def test_a_new_event_appears_at_the_top() -> None:
    fake = LongEvent()
    app = FleetApp(fake, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        newer = EventView(10, NOW - 1, "info", "host_up", "atlas is back", "atlas")
        screen.post_message(EventsLoaded([newer, *screen.events]))
        await settle(pilot)
        table = screen.query_one(KeyedTable)
        assert str(table.get_row_at(0)[-1]) == "atlas is back"
        assert str(table.get_row_at(1)[2]) == "hook_failed"


async def test_the_message_column_takes_the_width_the_others_leave() -> None:
    app = FleetApp(FakeService(), clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = await events_table(pilot)
        widths = {key.value: column.width for key, column in table.columns.items()}
        assert widths["message"] == 160 - 2 - 2 * 5 - sum(
            width for key, width in widths.items() if key != "message")
        assert widths["kind"] >= len("driver_version_changed")
        await pilot.press("down", "down")
        chosen, rows = table.selected_key, table.row_count
        await pilot.resize_terminal(100, 30)
        await settle(pilot)
        narrow = {key.value: column.width for key, column in table.columns.items()}
        assert narrow["message"] == 40 and table.row_count == rows  # its own width at least
        assert table.selected_key == chosen
