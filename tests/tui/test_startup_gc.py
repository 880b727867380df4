"""The app keeps what lives as long as it does out of the cyclic collector's walks while it runs
(the first frame of a big fleet paid two full collections of everything otherwise), and hands
it back when it exits."""

from __future__ import annotations

import gc

from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp


async def test_objects_alive_at_mount_are_frozen_until_the_app_exits() -> None:
    gc.unfreeze()
    app = FleetApp(FakeService(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        # the modules and the widget tree at least: tens of thousands of objects
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0
