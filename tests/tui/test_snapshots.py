"""Screen snapshots (SVG, compared by pytest-textual-snapshot) of the main screens at 120×36 and
80×24 with frozen time and fixed data. Update deliberately with `--snapshot-update`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp

SIZES = [(120, 36), (80, 24)]
pytestmark = pytest.mark.slow  # ~3 s per snapshot


def keys(*pressed: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        for key in pressed:
            await pilot.press(key)
            await settle(pilot)
        for box in pilot.app.screen.query(Input):
            box.cursor_blink = False
        await settle(pilot)

    return run_before


SCREENS = {
    "overview": keys(),
    "overview_expanded": keys("down", "down", "space", "up", "space"),
    "host_detail": keys("down", "down", "enter"),
    "tasks": keys("t", "enter"),
    "events": keys("e"),
    "dispatch": keys("d", "enter"),
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen_snapshot(snap_compare: Callable[..., bool], screen: str,
                         size: tuple[int, int]) -> None:
    app = FleetApp(FakeService(), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=SCREENS[screen])
