"""Allocations & reservations: who holds which GPU, until when; release reservations."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from fleet.errors import FleetError
from tui import format as fmt
from tui.messages import AllocationsLoaded
from tui.screens.base import FleetScreen, report_failure
from tui.screens.confirm import ConfirmScreen
from tui.service import AllocationView
from tui.widgets.keyed_table import KeyedTable

ALLOCATION_COLUMNS = (("id", "ID", 5), ("kind", "Kind", 11), ("gpu", "Host:GPU", 18),
                      ("owner", "Owner", 10), ("task", "Task", 6), ("age", "Since", 6),
                      ("expires", "Expires in", 10), ("idle", "Idle for", 8),
                      ("note", "Note", 24))
REFRESH_S = 3.0


class AllocationsScreen(FleetScreen):
    """Active task allocations and operator reservations."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("x", "release", "Release reservation"),
                Binding("escape", "app.switch_mode('fleet')", "Fleet", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.allocations: dict[int, AllocationView] = {}

    def compose(self) -> ComposeResult:
        yield Static("Allocations & reservations — x: release a reservation  "
                     "(reserve from the fleet overview with r)", id="alloc-title")
        yield KeyedTable(ALLOCATION_COLUMNS, id="allocations")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(KeyedTable).focus()
        self.load()
        self.set_interval(REFRESH_S, self.load)

    @work(exclusive=True, group="allocations")
    async def load(self) -> None:
        try:
            allocations = await self.service.allocations()
        except FleetError as exc:
            report_failure(self, "list allocations", exc)
            return
        self.post_message(AllocationsLoaded(allocations))

    @on(AllocationsLoaded)
    def loaded(self, message: AllocationsLoaded) -> None:
        now = self.now()
        self.allocations = {a.allocation_id: a for a in message.allocations}
        self.query_one(KeyedTable).sync(
            {str(a.allocation_id): _cells(a, now) for a in message.allocations})

    def refresh_data(self) -> None:
        self.load()

    def action_release(self) -> None:
        key = self.query_one(KeyedTable).selected_key
        allocation = self.allocations.get(int(key)) if key else None
        if allocation is None:
            return
        if allocation.kind != "reservation":
            self.notify("task allocations end with their task: cancel the task instead",
                        severity="warning")
            return
        allocation_id, service = allocation.allocation_id, self.service

        def decided(confirmed: bool | None) -> None:
            if confirmed:
                self.perform(f"release reservation {allocation_id}",
                             lambda: service.release(allocation_id),
                             f"released reservation {allocation_id}")

        self.app.push_screen(ConfirmScreen(
            f"Release {allocation.owner}'s reservation of "
            f"{allocation.host} GPU {allocation.gpu_index}?"), decided)


def _cells(allocation: AllocationView, now: float) -> tuple[object, ...]:
    expires = (fmt.age(max(0.0, allocation.expires_at - now)).replace("now", "<10s")
               if allocation.expires_at is not None else "never")
    return (
        str(allocation.allocation_id),
        Text(allocation.kind, style="cyan" if allocation.kind == "task" else "magenta"),
        fmt.clip(f"{allocation.host}:{allocation.gpu_index}", 18),
        fmt.clip(allocation.owner, 10),
        str(allocation.task_id) if allocation.task_id is not None else "–",
        fmt.age(now - allocation.created_at),
        expires,
        Text(fmt.age(now - allocation.idle_since), style="bold yellow")
        if allocation.idle_since is not None else "–",
        fmt.clip(allocation.note or "", 24),
    )
