"""Yes/no confirmation dialog for actions that change the fleet (drain, reserve, cancel, adopt)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Asks `question`, explains `detail`; dismisses with True only on an explicit yes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "", *, yes_label: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-title", markup=False)  # names a task
            if self.detail:
                yield Static(self.detail, classes="dialog-detail", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes_label} (y)", variant="warning", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
