"""Help screen: every key binding of the app and of each screen, and what the screens show."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
[b]fleet[/b] — every GPU of the fleet, live.  Ctrl+P opens the command palette (every action).

[b]Anywhere[/b]
  f  fleet overview      t  tasks            a  allocations & reservations
  e  events              v  discovery        u  users (who holds what, GPU time)
  d  dispatch a task
  ?  this help           q  quit             Esc  back / close dialog

[b]Fleet overview[/b]
  ↑↓ PgUp PgDn  move     Enter  host detail       Space / →  expand host to GPUs
  ←  collapse            s  cycle sort (name, util, memory, temp, free, state)
  /  filter: --hosts terms (gpu*, @group, label:key=value, !name), state:down|hot|drained,
     or part of a host name          g  free GPUs only (free = a dispatch could use it now)
  n  drain / undrain host or GPU      r  reserve GPU(s) for 1 h

[b]Host detail[/b]
  [ ]  history window (5 min … 24 h)     n  drain / undrain     r  reserve free GPUs

[b]Dispatch dialog[/b]  Enter  preview placement (eligible GPUs and every exclusion)
  Ctrl+S  submit (then the new task's log opens)     Esc  close
[b]Tasks[/b]       Enter  follow the task's log     x  cancel the task
[b]Allocations[/b] x  release the reservation
[b]Events[/b]      newest first   Enter  whole message   /  filter text   w  minimum severity
[b]Discovery[/b]   Enter  adopt the candidate (shows its host key fingerprint to confirm)
  s  scan the network now (mDNS, a few seconds)

Colours: util/memory green < 50/60 % ≤ yellow < 90 % ≤ red; temperature yellow from 75 °C,
red from 85 °C.  States are also written out (DOWN, DRAINED, HOT, FAILED), so NO_COLOR works.
"""


class HelpScreen(ModalScreen[None]):
    """Key bindings and screen overview."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Static(HELP_TEXT)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
