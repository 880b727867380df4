"""Dispatch dialog: script, GPUs and constraints; shows the placement preview before submitting."""

from __future__ import annotations

import re
import shlex
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Static

from fleet.errors import ConfigError, FleetError
from tui.messages import ActionDone, PreviewReady, ServiceFailed
from tui.service import DispatchRequest, FleetService, PlacementPreview

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int | None:
    """`20G`, `512M`, `1.5T` (binary units) as bytes; empty is None; anything else a ConfigError."""
    if not text.strip():
        return None
    match = _SIZE.match(text)
    if match is None:
        raise ConfigError(f"memory size {text!r}: expected a number with K, M, G or T")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


class DispatchScreen(ModalScreen[None]):
    """Fill in the request, preview where it would run and why, then submit."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close"),
                Binding("ctrl+s", "submit", "Submit", show=False)]

    def __init__(self, service: FleetService) -> None:
        super().__init__()
        self.service = service
        self.preview: PlacementPreview | None = None
        self.previewed: DispatchRequest | None = None

    def compose(self) -> ComposeResult:
        scripts = self.service.suggested_scripts()
        with Vertical(classes="dialog dispatch"):
            yield Static("Dispatch a task", classes="dialog-title")
            with Horizontal(classes="field"):
                yield Label("Script", classes="field-label")
                yield Input(value=scripts[0] if scripts else "", id="script",
                            suggester=SuggestFromList(scripts, case_sensitive=True),
                            placeholder="path of the script on this machine")
            with Horizontal(classes="field"):
                yield Label("Arguments", classes="field-label")
                yield Input(id="args", placeholder="e.g. --epochs 3 (shell-style quoting)")
            with Horizontal(classes="field"):
                yield Label("GPUs", classes="field-label")
                yield Input(value="1", id="gpus", type="integer")
                yield Label("Min free mem", classes="field-label")
                yield Input(id="min-mem", placeholder="e.g. 20G")
            with Horizontal(classes="field"):
                yield Label("Hosts", classes="field-label")
                yield Input(id="hosts", placeholder="pattern: gpu*, @group, label:k=v (optional)")
            yield Static("Enter or Preview shows where it would run.", id="preview")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Preview", id="preview-button")
                yield Button("Submit", variant="primary", id="submit", disabled=True)
                yield Button("Close", id="close")

    def request(self) -> DispatchRequest:
        """The request as typed (raises ConfigError for bad values)."""
        script = self.query_one("#script", Input).value.strip()
        if not script:
            raise ConfigError("a script is required")
        gpus_text = self.query_one("#gpus", Input).value.strip() or "1"
        gpus = int(gpus_text)
        if gpus < 0:
            raise ConfigError("GPUs must be 0 or more")
        try:
            args = tuple(shlex.split(self.query_one("#args", Input).value))
        except ValueError as exc:
            raise ConfigError(f"arguments: {exc}") from exc
        return DispatchRequest(
            script=script, args=args, gpus=gpus,
            min_free_memory_bytes=parse_size(self.query_one("#min-mem", Input).value),
            hosts=self.query_one("#hosts", Input).value.strip() or None)

    @on(Input.Submitted)
    @on(Button.Pressed, "#preview-button")
    def ask_preview(self) -> None:
        try:
            request = self.request()
        except ConfigError as exc:
            self._show_preview_text(Text(str(exc), style="bold red"))
            return
        self.query_one("#submit", Button).disabled = True
        self._show_preview_text(Text("asking the scheduler…", style="italic"))
        self.run_preview(request)

    @work(exclusive=True, group="preview")
    async def run_preview(self, request: DispatchRequest) -> None:
        try:
            preview = await self.service.preview(request)
        except FleetError as exc:
            self.post_message(ServiceFailed("placement preview", str(exc)))
            return
        self.previewed = request
        self.post_message(PreviewReady(preview))

    @on(PreviewReady)
    def show_preview(self, message: PreviewReady) -> None:
        preview = message.preview
        self.preview = preview
        text = Text()
        if preview.feasible:
            text.append(f"would run on {preview.host} GPU "
                        f"{', '.join(map(str, preview.gpu_indices)) or '(none)'}\n",
                        style="bold green")
        else:
            text.append("no placement possible now\n", style="bold red")
        for line in preview.explanation[:12]:
            text.append(f"  {line}\n")
        self._show_preview_text(text)
        self.query_one("#submit", Button).disabled = not preview.feasible

    @on(ServiceFailed)
    def preview_failed(self, message: ServiceFailed) -> None:
        self._show_preview_text(Text(f"{message.action}: {message.error}", style="bold red"))

    def _show_preview_text(self, text: Text) -> None:
        self.query_one("#preview", Static).update(text)

    @on(Button.Pressed, "#submit")
    def action_submit(self) -> None:
        if self.preview is None or not self.preview.feasible or self.previewed is None:
            return
        try:
            request = self.request()
        except ConfigError as exc:
            self._show_preview_text(Text(str(exc), style="bold red"))
            return
        if request != self.previewed:
            self._show_preview_text(Text("the request changed: preview it again",
                                         style="yellow"))
            self.query_one("#submit", Button).disabled = True
            return
        self.submit(request)

    @work(exclusive=True, group="submit")
    async def submit(self, request: DispatchRequest) -> None:
        try:
            task = await self.service.dispatch(request)
        except FleetError as exc:
            self.post_message(ServiceFailed("dispatch", str(exc)))
            return
        self.post_message(ActionDone(f"dispatched task {task.task_id} ({task.name})"
                                     + (f" on {task.host}" if task.host else "")))

    @on(ActionDone)
    def submitted(self, message: ActionDone) -> None:
        message.stop()
        self.app.post_message(ActionDone(message.summary))
        self.dismiss(None)

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
