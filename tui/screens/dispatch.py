"""Dispatch dialog: script, GPUs and constraints; shows the placement preview before submitting."""

from __future__ import annotations

import shlex
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Footer, Input, Label, Static

from fleet.errors import ConfigError, FleetError
from fleet.placement.request import MemorySize, parse_memory_size
from tui.messages import PreviewReady, ServiceFailed, TaskSubmitted
from tui.service import DispatchRequest, FleetService, PlacementPreview, TaskView

PREVIEW_ELIGIBLE = 3  # eligible GPUs listed in the preview (best first); exclusions follow
KEYS_HINT = "Enter: preview · Ctrl+S: submit · Esc: close"


def parse_min_free_memory(text: str) -> MemorySize | None:
    """The dialog's "Min free mem" as fleet parses --min-free-mem (20G, 512M, 80%); empty: None."""
    return parse_memory_size(text, what="min free mem") if text.strip() else None


class DispatchScreen(ModalScreen[TaskView | None]):
    """Fill in the request, preview where it would run and why, then submit (the new task)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close"),
                Binding("ctrl+s", "submit", "Submit", priority=True)]

    def __init__(self, service: FleetService) -> None:
        super().__init__()
        self.service = service
        self.preview: PlacementPreview | None = None
        self.previewed: DispatchRequest | None = None

    def compose(self) -> ComposeResult:
        scripts = self.service.suggested_scripts()
        with Vertical(classes="dialog dispatch"):
            yield Static(f"[b]Dispatch a task[/b]   [dim]{KEYS_HINT}[/dim]",
                         classes="dialog-title")
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
                yield Input(id="min-mem", placeholder="e.g. 20G or 50%")
            with Horizontal(classes="field"):
                yield Label("Hosts", classes="field-label")
                yield Input(id="hosts", placeholder="pattern: gpu*, @group, label:k=v (optional)")
            with VerticalScroll(id="preview-box"):
                yield Static("Enter or Preview shows where it would run.", id="preview")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Preview", id="preview-button")
                yield Button("Submit (Ctrl+S)", variant="primary", id="submit", disabled=True)
                yield Button("Close", id="close")
        yield Footer()

    def request(self) -> DispatchRequest:
        """The request as typed (raises ConfigError for bad values)."""
        script = self.query_one("#script", Input).value.strip()
        if not script:
            raise ConfigError("a script is required")
        gpus_text = self.query_one("#gpus", Input).value.strip() or "1"
        if not gpus_text.isascii() or not gpus_text.isdigit() or int(gpus_text) < 1:
            # the words of PlacementRequest's own check, which a typed `-` or `0` would reach
            raise ConfigError(f"GPUs must be a whole number of at least 1, not {gpus_text!r}")
        gpus = int(gpus_text)
        try:
            args = tuple(shlex.split(self.query_one("#args", Input).value))
        except ValueError as exc:
            raise ConfigError(f"arguments: {exc}") from exc
        return DispatchRequest(
            script=script, args=args, gpus=gpus,
            min_free_memory=parse_min_free_memory(self.query_one("#min-mem", Input).value),
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
        if preview.explanation:
            text.append(f"eligible ({len(preview.explanation)}, best first):\n", style="bold")
            for line in preview.explanation[:PREVIEW_ELIGIBLE]:
                text.append(f"  {line}\n")
            if len(preview.explanation) > PREVIEW_ELIGIBLE:
                text.append(f"  … {len(preview.explanation) - PREVIEW_ELIGIBLE} more\n")
        if preview.exclusions:
            more = ", scroll for all" if len(preview.exclusions) > PREVIEW_ELIGIBLE else ""
            text.append(f"excluded ({len(preview.exclusions)}{more}):\n", style="bold")
            for line in preview.exclusions:
                text.append(f"  {line}\n")
        text.rstrip()
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
        self.post_message(TaskSubmitted(task))

    @on(TaskSubmitted)
    def submitted(self, message: TaskSubmitted) -> None:
        message.stop()
        self.dismiss(message.task)

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
