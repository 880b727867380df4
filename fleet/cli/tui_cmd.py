"""`fleet tui` and `fleet demo`: open the full-screen UI (on the inventory, or a simulated fleet).

textual and the tui package are imported by name inside the commands (importlib), so the CLI
starts fast and the fleet package never depends on the UI layer.
"""

from __future__ import annotations

import click

from fleet.cli.context import global_options
from fleet.cli.runner import run_async


@click.command()
@click.option("--interval", default="2s", show_default=True, metavar="DURATION",
              help="How often to refresh when the monitor is not running.")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key of hosts seen for the first time (trust on first use).")
@click.pass_context
def tui(ctx: click.Context, interval: str, accept_new: bool) -> int:
    """Open the full-screen fleet UI: hosts, GPUs, tasks, allocations, events, discovery.

    Keys: f fleet, t tasks, a allocations, e events, v discovery, d dispatch, ? help, q quit;
    Ctrl+P lists every action.

    \b
    Examples:
      fleet tui
      fleet -i lab.yaml tui --interval 1s
      NO_COLOR=1 fleet tui
    """
    import importlib

    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    poll_s = parse_duration(interval, what="--interval")

    async def run() -> int:
        async with open_fleet(options.db_url, options.inventory_path,
                              accept_new=accept_new) as service:
            app_module = importlib.import_module("tui.app")
            adapter_module = importlib.import_module("tui.adapter")
            app = app_module.FleetApp(adapter_module.FleetAdapter(service,
                                                                  poll_interval_s=poll_s))
            await app.run_async()
            return int(app.return_code or 0)

    return run_async(run)


@click.command()
@click.option("--text", "text_rounds", type=click.IntRange(1, 1000), metavar="ROUNDS",
              help="Print ROUNDS rounds of `fleet status` text instead of opening the UI.")
def demo(text_rounds: int | None) -> int:
    """Run a simulated GPU fleet on this machine and open the UI on it (no GPU, no root).

    Eight hosts served over real SSH on 127.0.0.1 with simulated GPUs whose load, memory and
    temperature drift; one host drops out and returns, one GPU overheats. Everything lives
    in a temporary directory that is removed on exit (q).

    \b
    Examples:
      fleet demo
      fleet demo --text 3
    """
    from fleet.demo import demo_main

    return demo_main(text_rounds=text_rounds)
