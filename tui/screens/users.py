"""Users: who holds what now (and how much of it idle), and each user's share of the GPU time
over the last 7 days, as bars, with how busy it was (`fleet usage`)."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from fleet.errors import FleetError
from tui import format as fmt
from tui.messages import UsageLoaded
from tui.screens.base import FleetScreen, report_failure
from tui.service import AllocationView, UserUsageView
from tui.widgets.keyed_table import KeyedTable

WINDOW_S = 7 * 86400.0
REFRESH_S = 10.0
BAR_WIDTH = 20
USER_COLUMNS = (("user", "User", 12), ("holding", "Holding", 7), ("idle", "Idle", 5),
                ("share", "Share of GPU-hours (7 d)", BAR_WIDTH + 6), ("hours", "GPU-h", 8),
                ("busy", "Busy", 8), ("efficiency", "Eff.", 5), ("tasks", "Tasks", 6),
                ("failed", "Failed", 6))


class UsersScreen(FleetScreen):
    """Per user: GPUs held now, idle ones among them, and GPU time over the last 7 days."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.switch_mode('fleet')", "Fleet", show=False)]

    def compose(self) -> ComposeResult:
        yield Static("Users — GPUs held now (idle ones in yellow) and each user's share of the "
                     "GPU-hours held over the last 7 days", id="users-title")
        yield KeyedTable(USER_COLUMNS, id="users")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(KeyedTable).focus()
        self.load()
        self.set_interval(REFRESH_S, self.load)

    @work(exclusive=True, group="users")
    async def load(self) -> None:
        try:
            usage = await self.service.usage(self.now() - WINDOW_S)
            allocations = await self.service.allocations()
        except FleetError as exc:
            report_failure(self, "read usage", exc)
            return
        self.post_message(UsageLoaded(usage, allocations))

    @on(UsageLoaded)
    def loaded(self, message: UsageLoaded) -> None:
        self.query_one(KeyedTable).sync(user_rows(message.usage, message.allocations))

    def refresh_data(self) -> None:
        self.load()


def user_rows(usage: list[UserUsageView], allocations: list[AllocationView]
              ) -> dict[str, tuple[object, ...]]:
    """user → the table's cells: everyone with usage in the window or a GPU held now."""
    holding = Counter(a.owner for a in allocations)
    idle = Counter(a.owner for a in allocations if a.idle_since is not None)
    by_user = {row.user: row for row in usage}
    total = sum(row.gpu_hours for row in usage) or 1.0
    users = [row.user for row in usage] + sorted(set(holding) - set(by_user))
    return {user: _cells(user, by_user.get(user), holding[user], idle[user], total)
            for user in users}


def _cells(user: str, row: UserUsageView | None, holding: int, idle: int,
           total: float) -> tuple[object, ...]:
    share = (row.gpu_hours / total) if row is not None else 0.0
    filled = round(share * BAR_WIDTH)
    bar = Text("█" * filled, style="cyan") + Text("·" * (BAR_WIDTH - filled), style="dim")
    bar.append(f" {share:4.0%}")
    return (
        fmt.clip(user, 12),
        str(holding),
        Text(str(idle), style="bold yellow") if idle else "0",
        bar,
        f"{row.gpu_hours:.1f}" if row is not None else "0.0",
        f"{row.busy_gpu_hours:.1f}" if row is not None else "0.0",
        f"{row.efficiency:.0%}" if row is not None and row.efficiency is not None else "–",
        str(row.tasks) if row is not None else "0",
        Text(str(row.failures), style="red") if row is not None and row.failures else "0",
    )
