"""One event in full: time, severity, kind, where, and the whole message (the table clips it)."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.format import safe_cell
from tui.service import EventView


class EventDetailScreen(ModalScreen[None]):
    """The selected event, every field; Esc, Enter or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close")]

    def __init__(self, event: EventView) -> None:
        super().__init__()
        self.event = event

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog event-detail"):
            yield Static(f"Event {self.event.event_id}", classes="dialog-title")
            yield Static(event_text(self.event), id="event-message")

    def action_close(self) -> None:
        self.dismiss(None)


def event_text(event: EventView) -> Text:
    """Every field of the event as plain text (its message comes from outside: never markup)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(event.ts))
    where = " ".join(part for part in (
        event.host or "", f"GPU {event.gpu_index}" if event.gpu_index is not None else "",
        f"task {event.task_id}" if event.task_id is not None else "") if part)
    text = Text(f"{stamp}  {event.severity}  {event.kind}\n", style="bold")
    if where:
        text.append(f"{where}\n")
    text.append("\n")
    text.append(str(safe_cell(event.message)))
    return text
