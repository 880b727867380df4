"""Fleet overview: every host (expandable to its GPUs), with sort, filter, drain and reserve."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.widgets import DataTable, Footer, Input, Static

from fleet.snapshot import FleetSnapshot, HostSnapshot
from tui.rows import SORTS, RowFilter, gpu_is_free
from tui.screens.base import FleetScreen
from tui.screens.confirm import ConfirmScreen
from tui.widgets.fleet_table import FleetTable


class OverviewScreen(FleetScreen):
    """The main screen: one row per host, GPU rows under expanded hosts."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,right", "toggle_expand", "Expand"),
        Binding("left", "collapse", "Collapse", show=False),
        Binding("s", "cycle_sort", "Sort"),
        Binding("slash", "filter", "Filter"),
        Binding("g", "toggle_free", "Free only"),
        Binding("n", "toggle_drain", "Drain"),
        Binding("r", "reserve", "Reserve"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    _summary: tuple[str, str, str] = ("", "", "")  # the summary line last shown: markup, values

    def compose(self) -> ComposeResult:
        yield Static("waiting for the fleet's first readings…", id="summary")
        yield FleetTable(id="fleet-table")
        yield Input(placeholder="filter: name  gpu*  @group  label:key=value  state:down  (Enter)",
                    id="filter")
        yield Footer()

    @property
    def table(self) -> FleetTable:
        """The host/GPU table."""
        return self.query_one(FleetTable)

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.table.focus()

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        self.table.apply(snapshot, self.now())
        self._summarise(snapshot)

    def show_watch_failure(self, reason: str) -> None:
        self.query_one("#summary", Static).update(Text(reason, style="bold red"))

    def _redraw(self) -> None:
        snapshot = self.fleet_app.snapshot
        if snapshot is not None:
            self.table.apply(snapshot, self.now(), force=True)
            self._summarise(snapshot)

    def _summarise(self, snapshot: FleetSnapshot) -> None:
        hosts = snapshot.hosts
        up = sum(1 for h in hosts if h.state == "up")
        gpus = sum(len(h.gpus) for h in hosts)
        now = self.now()
        counts = self.table.free_counts
        free = sum(counts(h, now) for h in hosts)
        hot = sum(1 for h in hosts for g in h.gpus if g.state == "hot")
        drained = sum(1 for h in hosts if h.drained)
        table = self.table
        parts = [f"[b]{len(hosts)}[/] hosts ([green]{up} up[/]"
                 + (f", [b red]{len(hosts) - up} not up[/]" if len(hosts) > up else "") + ")",
                 f"[b]{gpus}[/] GPUs ([green]{free} free[/])"]
        if hot:
            parts.append(f"[b red]{hot} hot[/]")
        if drained:
            parts.append(f"[magenta]{drained} drained[/]")
        parts.append("sort: [b]$sort[/]")
        if table.row_filter.query:
            parts.append("filter: [b]$query[/]")  # as typed: `[a-c]*` or `[/]` is no markup
        if table.row_filter.free_only:
            parts.append("[b]free GPUs only[/]")
        summary = ("  ·  ".join(parts), table.sort_name, table.row_filter.query)
        if summary != self._summary:  # an unchanged summary costs no refresh
            self._summary = summary
            text = Content.from_markup(summary[0], sort=summary[1], query=summary[2])
            self.query_one("#summary", Static).update(text, layout=False)  # one line, fixed

    def selected_host(self) -> HostSnapshot | None:
        """The host under the cursor (or the host of the GPU under it)."""
        key = self.table.selected_key
        snapshot = self.fleet_app.snapshot
        if key is None or snapshot is None:
            return None
        return snapshot.host(key.split(":")[0])

    def selected_gpu_index(self) -> int | None:
        """The GPU index under the cursor, or None on a host row."""
        key = self.table.selected_key
        if key is None or ":" not in key:
            return None
        return int(key.rsplit(":", 1)[1])

    @on(DataTable.RowSelected)
    def open_detail(self, event: DataTable.RowSelected) -> None:
        event.stop()
        host = self.selected_host()
        if host is not None:
            from tui.screens.host_detail import HostDetailScreen

            self.app.push_screen(HostDetailScreen(host.spec.name))

    def action_toggle_expand(self) -> None:
        host = self.selected_host()
        if host is None:
            return
        name = host.spec.name
        self.table.expanded ^= {name}
        self._redraw()

    def action_collapse(self) -> None:
        host = self.selected_host()
        if host is not None and host.spec.name in self.table.expanded:
            self.table.expanded.discard(host.spec.name)
            self._redraw()

    def action_cycle_sort(self) -> None:
        table = self.table
        table.sort_name = SORTS[(SORTS.index(table.sort_name) + 1) % len(SORTS)]
        self._redraw()

    def action_toggle_free(self) -> None:
        table = self.table
        table.row_filter = RowFilter(table.row_filter.query, not table.row_filter.free_only)
        self._redraw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.table.row_filter.query
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = False
        self.table.row_filter = RowFilter("", self.table.row_filter.free_only)
        self.table.focus()
        self._redraw()

    @on(Input.Submitted, "#filter")
    def apply_filter(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.table.row_filter = RowFilter(event.value.strip(), self.table.row_filter.free_only)
        self.table.focus()
        self._redraw()

    def action_toggle_drain(self) -> None:
        host = self.selected_host()
        if host is None:
            return
        index = self.selected_gpu_index()
        target = host.spec.name if index is None else f"{host.spec.name} GPU {index}"
        drained = host.drained if index is None else any(
            g.drained for g in host.gpus if g.index == index)
        name = host.spec.name
        service = self.service

        def decided(confirmed: bool | None) -> None:
            if not confirmed:
                return
            if drained:
                self.perform(f"undrain {target}", lambda: service.undrain(name, index),
                             f"undrained {target}")
            else:
                self.perform(f"drain {target}",
                             lambda: service.drain(name, index, "drained from the TUI"),
                             f"drained {target}: no new work will be placed there")

        verb = "Undrain" if drained else "Drain"
        self.app.push_screen(ConfirmScreen(f"{verb} {target}?", (
            "New tasks may be placed there again." if drained else
            "No new tasks will be placed there; running tasks continue.")), decided)

    def action_reserve(self) -> None:
        host = self.selected_host()
        if host is None:
            return
        index = self.selected_gpu_index()
        indices = ([index] if index is not None
                   else [g.index for g in host.gpus if gpu_is_free(host, g, self.now())])
        if not indices:
            self.notify(f"{host.spec.name} has no free GPU to reserve",
                        severity="warning", markup=False)
            return
        name = host.spec.name
        service = self.service
        what = f"{name} GPU {', '.join(map(str, indices))}"

        def decided(confirmed: bool | None) -> None:
            if confirmed:
                self.perform(f"reserve {what}",
                             lambda: service.reserve(name, indices, 3600.0, "reserved in the TUI"),
                             f"reserved {what} for 1h")

        self.app.push_screen(ConfirmScreen(
            f"Reserve {what} for 1 hour?",
            "The scheduler will not place tasks on reserved GPUs until you release them "
            "(Allocations screen, x)."), decided)
