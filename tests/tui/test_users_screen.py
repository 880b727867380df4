"""The Users screen: who holds what now (idle ones counted), each user's share of the GPU-hours
over the last 7 days as a bar, efficiency and failures, from the service's usage report."""

from __future__ import annotations

from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp
from tui.screens.users import WINDOW_S, UsersScreen, user_rows
from tui.service import AllocationView, UserUsageView
from tui.widgets.keyed_table import KeyedTable


def test_rows_hold_shares_and_idle_gpus() -> None:
    usage = [UserUsageView("ana", 30.0, 24.0, 0.8, 12, 1), UserUsageView("bob", 10.0, 1.0, 0.1,
                                                                         2, 0)]
    held = [AllocationView(1, "task", "ana", "a", 0, 0), AllocationView(2, "reservation", "bob",
                                                                         "a", 1, 0, idle_since=5),
            AllocationView(3, "reservation", "cy", "a", 2, 0)]
    rows = user_rows(usage, held)
    assert list(rows) == ["ana", "bob", "cy"]  # cy holds a GPU, with no usage yet
    ana, bob, cy = (rows[user] for user in ("ana", "bob", "cy"))
    assert (ana[1], str(ana[2]), str(ana[3]).strip().endswith("75%")) == ("1", "0", True)
    assert str(ana[3]).count("█") == 15  # 75 % of a 20-cell bar
    assert str(bob[2]) == "1" and str(bob[3]).strip().endswith("25%")
    assert (str(ana[6]), str(bob[6]), str(ana[8])) == ("80%", "10%", "1")
    assert (cy[1], str(cy[3]).count("█"), cy[4], cy[6]) == ("1", 0, "0.0", "–")


async def test_u_opens_the_users_screen_over_the_last_seven_days() -> None:
    service = FakeService()
    app = FleetApp(service, clock=lambda: NOW, watch_snapshots=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, UsersScreen)
        for _ in range(50):
            if app.screen.query_one(KeyedTable).row_count == 2:
                break
            await pilot.pause(0.05)
        assert app.screen.query_one(KeyedTable).row_count == 2
    assert ("usage", NOW - WINDOW_S) in service.calls
