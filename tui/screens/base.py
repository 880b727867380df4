"""Shared base of the TUI's screens: typed access to the service and fire-and-report actions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from textual.message_pump import MessagePump
from textual.screen import Screen

from fleet.errors import FleetError
from fleet.snapshot import FleetSnapshot
from tui.messages import ActionDone, ServiceFailed
from tui.service import FleetService

if TYPE_CHECKING:
    from tui.app import FleetApp


class FleetScreen(Screen[None]):
    """A screen of the fleet app; subclasses override `show_snapshot` to follow live data."""

    @property
    def fleet_app(self) -> FleetApp:
        """The running app, typed."""
        from tui.app import FleetApp

        return cast(FleetApp, self.app)

    @property
    def service(self) -> FleetService:
        """The fleet service this app talks to."""
        return self.fleet_app.service

    def now(self) -> float:
        """The app's clock (frozen in tests)."""
        return self.fleet_app.clock()

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        """Follow a new live snapshot (called by the app for the visible screen only)."""

    def refresh_data(self) -> None:
        """Reload what the screen lists (after an action changed it)."""

    def show_watch_failure(self, reason: str) -> None:
        """Say, where the screen shows live data, why none will come."""

    def on_screen_resume(self) -> None:
        snapshot = self.fleet_app.snapshot
        if snapshot is not None:
            self.show_snapshot(snapshot)
        elif self.fleet_app.watch_failure is not None:
            self.show_watch_failure(self.fleet_app.watch_failure)

    def perform(self, action: str, call: Callable[[], Awaitable[object]], done: str) -> None:
        """Run a service call in a worker; report `done` or the error as a message."""

        async def run() -> None:
            try:
                await call()
            except FleetError as exc:
                self.post_message(ServiceFailed(action, str(exc)))
                return
            self.post_message(ActionDone(done))

        self.run_worker(run(), group="actions", name=action)


def report_failure(screen: MessagePump, action: str, exc: FleetError) -> None:
    """Post a failed load so the app shows it (used by the screens' loader workers)."""
    screen.post_message(ServiceFailed(action, str(exc)))
