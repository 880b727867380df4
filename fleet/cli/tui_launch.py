"""The one place fleet starts the TUI (`fleet tui`, `fleet demo`): fleet's only `tui` imports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.client.session import Service
    from fleet.monitor.config import Settings


async def run_tui(fleet: Service, *, hosts: str | None = None, settings: Settings | None = None,
                  scripts: Sequence[str] = ()) -> int:
    """Open the full-screen UI on `fleet` (local, or a `fleet serve`) until the operator
    quits; returns the exit code.

    `hosts` narrows the live view (a --hosts pattern); `settings` are the monitor's when the
    UI has to start one in this process; `scripts` are offered in the dispatch dialog.
    textual loads here, on first use, so `fleet --help` and `fleet dispatch` never pay for it.
    """
    from tui.adapter import FleetAdapter
    from tui.app import FleetApp

    app = FleetApp(FleetAdapter(fleet, scripts=scripts, hosts=hosts, settings=settings))
    await app.run_async()
    return int(app.return_code or 0)
