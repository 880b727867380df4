"""The fleet Textual app: screens as modes, the live snapshot worker, palette commands, errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from fleet.errors import FleetError
from fleet.snapshot import FleetSnapshot
from tui.messages import ActionDone, ServiceFailed, SnapshotArrived
from tui.screens.allocations import AllocationsScreen
from tui.screens.base import FleetScreen
from tui.screens.discovery import DiscoveryScreen
from tui.screens.dispatch import DispatchScreen
from tui.screens.events import EventsScreen
from tui.screens.help import HelpScreen
from tui.screens.overview import OverviewScreen
from tui.screens.tasks import TasksScreen
from tui.screens.users import UsersScreen
from tui.service import FleetService, TaskView

# (action on the screen, palette title, help) offered when the current screen has the action.
SCREEN_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("toggle_expand", "Expand / collapse host", "Show or hide the GPU rows of the selected host"),
    ("cycle_sort", "Cycle sort order", "Sort hosts by name, util, memory, temp, free, state"),
    ("filter", "Filter", "Filter rows (name, gpu*, @group, label:key=value, state:down)"),
    ("toggle_free", "Toggle free GPUs only", "Show only hosts with a free GPU"),
    ("toggle_drain", "Drain / undrain", "Stop or resume placing work on the selected host/GPU"),
    ("reserve", "Reserve GPU(s)", "Reserve the selected GPU (or the host's free GPUs) for 1 h"),
    ("cancel_task", "Cancel task", "Cancel the selected task"),
    ("release", "Release reservation", "Release the selected reservation"),
    ("cycle_severity", "Cycle minimum severity", "Show only events at or above a severity"),
    ("show_event", "Show the whole event", "The selected event's full message"),
    ("scan", "Scan the network", "Browse mDNS once for hosts to adopt"),
)
MODE_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("fleet", "Show fleet overview", "Every host and GPU, live"),
    ("tasks", "Show tasks", "Queued, running and finished tasks with their logs"),
    ("allocations", "Show allocations & reservations", "Who holds which GPU"),
    ("events", "Show events", "Health, host and task events"),
    ("discovery", "Show discovery candidates", "Hosts seen on the network; adopt them"),
    ("users", "Show users", "Who holds what now, and GPU time per user over 7 days"),
)


class FleetApp(App[None]):
    """Full-screen fleet UI over a `FleetService`; `clock` is injectable for frozen-time tests."""

    CSS_PATH = "app.tcss"
    TITLE = "fleet"
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        "fleet": OverviewScreen,
        "tasks": TasksScreen,
        "allocations": AllocationsScreen,
        "events": EventsScreen,
        "discovery": DiscoveryScreen,
        "users": UsersScreen,
    }
    DEFAULT_MODE = "fleet"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "switch_mode('fleet')", "Fleet"),
        Binding("t", "switch_mode('tasks')", "Tasks"),
        Binding("a", "switch_mode('allocations')", "Allocs"),
        Binding("e", "switch_mode('events')", "Events"),
        Binding("v", "switch_mode('discovery')", "Discover"),
        Binding("u", "switch_mode('users')", "Users"),
        Binding("d", "dispatch", "Dispatch"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, service: FleetService, *, clock: Callable[[], float] = time.time,
                 watch_snapshots: bool = True) -> None:
        super().__init__()
        self.service = service
        self.clock = clock
        self.snapshot: FleetSnapshot | None = None
        self.snapshots_seen = 0
        self.watch_failure: str | None = None  # why no snapshot will come, once watching failed
        self.first_frame_at: float | None = None
        self._watch = watch_snapshots

    def on_mount(self) -> None:
        if self._watch:
            self.follow_snapshots()

    @work(exclusive=True, group="watch")
    async def follow_snapshots(self) -> None:
        """Post every snapshot the service produces; failures become a message."""
        try:
            async for snapshot in self.service.watch():
                self.post_message(SnapshotArrived(snapshot))
        except FleetError as exc:
            self.watch_failure = f"not watching the fleet: {exc}"
            self.post_message(ServiceFailed("watch the fleet", str(exc)))
            screen = self.screen
            if isinstance(screen, FleetScreen):  # the toast goes; the reason stays on screen
                screen.show_watch_failure(self.watch_failure)

    @on(SnapshotArrived)
    def snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.snapshot = message.snapshot
        self.snapshots_seen += 1
        screen = self.screen
        if isinstance(screen, FleetScreen):
            screen.show_snapshot(message.snapshot)
        if self.first_frame_at is None:
            self.call_after_refresh(self._mark_first_frame)

    def _mark_first_frame(self) -> None:
        """Remember when the first snapshot was on screen (the benchmark's time to first frame)."""
        if self.first_frame_at is None:
            self.first_frame_at = time.monotonic()

    @on(ServiceFailed)
    def service_failed(self, message: ServiceFailed) -> None:
        self.notify(f"{message.action}: {message.error}", title="failed", severity="error",
                    timeout=8, markup=False)

    @on(ActionDone)
    def action_done(self, message: ActionDone) -> None:
        self.notify(message.summary, timeout=4, markup=False)
        screen = self.screen
        if isinstance(screen, FleetScreen):
            screen.refresh_data()

    def action_dispatch(self) -> None:
        if not isinstance(self.screen, DispatchScreen):
            self.push_screen(DispatchScreen(self.service), self._dispatched)

    def _dispatched(self, task: TaskView | None) -> None:
        """After a submit: the tasks screen, following the new task's log."""
        if task is None:
            return
        self.notify(f"dispatched task {task.task_id} ({task.name})"
                    + (f" on {task.host}" if task.host else ""), timeout=4, markup=False)
        self.switch_mode("tasks")
        screen = self.screen
        if isinstance(screen, TasksScreen):
            screen.follow_task(task)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Palette entries for every action: screens, dispatch, help and the screen's actions."""
        for mode, title, help_text in MODE_COMMANDS:
            yield SystemCommand(title, help_text, partial(self.switch_mode, mode))
        yield SystemCommand("Dispatch a task", "Pick a script, GPUs and constraints; preview",
                            self.action_dispatch)
        yield SystemCommand("Help: key bindings", "Every key of every screen", self.action_help)
        for action, title, help_text in SCREEN_COMMANDS:
            if hasattr(screen, f"action_{action}"):
                yield SystemCommand(title, help_text, partial(self.run_action, f"screen.{action}"))
        yield from super().get_system_commands(screen)
