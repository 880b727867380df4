"""Events: the fleet's event log (health, hosts, tasks, drains), filterable by text and severity."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.widgets import DataTable, Footer, Input, Static

from fleet.errors import FleetError
from tui.messages import EventsLoaded
from tui.screens.base import FleetScreen, report_failure
from tui.screens.event_detail import EventDetailScreen
from tui.service import EventView
from tui.widgets.keyed_table import KeyedTable

EVENT_COLUMNS = (("time", "Time", 8), ("severity", "Severity", 8), ("kind", "Kind", 22),
                 ("host", "Host", 14), ("message", "Message", 40))
SEVERITIES = ("info", "warning", "error", "critical")
SEVERITY_STYLES = {"info": "", "warning": "yellow", "error": "bold red", "critical": "bold red"}
REFRESH_S = 3.0


class EventsScreen(FleetScreen):
    """Newest events first; Enter shows one whole, `/` filters by text, `w` raises the severity."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("slash", "filter", "Filter"),
                Binding("w", "cycle_severity", "Min severity"),
                Binding("enter", "show_event", "Whole message", show=True),
                Binding("escape", "clear_filter", "Clear filter", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.events: list[EventView] = []
        self.query_text = ""
        self.min_severity = "info"

    def compose(self) -> ComposeResult:
        yield Static(id="events-title")
        yield KeyedTable(EVENT_COLUMNS, id="events", fill="message")
        yield Input(placeholder="filter events: text in kind, host or message (Enter)",
                    id="events-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#events-filter", Input).display = False
        self.query_one(KeyedTable).focus()
        self._title()
        self.load()
        self.set_interval(REFRESH_S, self.load)

    @work(exclusive=True, group="events")
    async def load(self) -> None:
        try:
            events = await self.service.events(500)
        except FleetError as exc:
            report_failure(self, "list events", exc)
            return
        self.post_message(EventsLoaded(events))

    @on(EventsLoaded)
    def loaded(self, message: EventsLoaded) -> None:
        self.events = message.events
        self._show()

    def _show(self) -> None:
        floor = SEVERITIES.index(self.min_severity)
        needle = self.query_text.lower()
        shown = {
            str(e.event_id): _cells(e) for e in self.events
            if (SEVERITIES.index(e.severity) if e.severity in SEVERITIES else 0) >= floor
            and (not needle or needle in f"{e.kind} {e.host or ''} {e.message}".lower())
        }
        self.query_one(KeyedTable).sync(shown)

    def _title(self) -> None:
        self.query_one("#events-title", Static).update(Content.from_markup(
            "Events, newest first — severity ≥ [b]$severity[/] (w)  ·  filter (/): [b]$query[/]"
            "  ·  Enter: whole message", severity=self.min_severity,
            query=self.query_text or "none"))  # the filter as typed, never markup

    @on(DataTable.RowSelected, "#events")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_show_event()

    def action_show_event(self) -> None:
        key = self.query_one(KeyedTable).selected_key
        chosen = next((e for e in self.events if str(e.event_id) == key), None)
        if chosen is not None:
            self.app.push_screen(EventDetailScreen(chosen))

    def action_cycle_severity(self) -> None:
        index = (SEVERITIES.index(self.min_severity) + 1) % len(SEVERITIES)
        self.min_severity = SEVERITIES[index]
        self._title()
        self._show()

    def action_filter(self) -> None:
        box = self.query_one("#events-filter", Input)
        box.display = True
        box.value = self.query_text
        box.focus()

    def action_clear_filter(self) -> None:
        self.query_one("#events-filter", Input).display = False
        self.query_text = ""
        self.query_one(KeyedTable).focus()
        self._title()
        self._show()

    @on(Input.Submitted, "#events-filter")
    def submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.query_text = event.value.strip()
        self.query_one(KeyedTable).focus()
        self._title()
        self._show()


def _cells(event: EventView) -> tuple[object, ...]:
    stamp = time.strftime("%H:%M:%S", time.gmtime(event.ts))
    return (stamp, Text(event.severity, style=SEVERITY_STYLES.get(event.severity, "")),
            event.kind[:16], (event.host or "–")[:14], Text(event.message[:200]))
