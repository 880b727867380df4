"""Fixtures for the TUI tests: a controllable fake service, the app on it, a settle helper."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from tests.tui.fake_service import NOW, FakeService
from tui.app import FleetApp


@pytest.fixture
def fake() -> FakeService:
    return FakeService()


@pytest.fixture
def app(fake: FakeService) -> FleetApp:
    return FleetApp(fake, clock=lambda: NOW)


async def settle(pilot: Pilot[None]) -> None:
    """Let pending workers (all but the endless snapshot watcher) finish and the screen redraw."""
    for _ in range(3):
        await pilot.pause()
        pending = [w for w in pilot.app.workers if w.group != "watch" and not w.is_finished]
        if pending:
            await pilot.app.workers.wait_for_complete(pending)
    await pilot.pause()
