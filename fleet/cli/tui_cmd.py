"""`fleet tui` and `fleet demo`: the full-screen UI on the inventory, or on a simulated fleet."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import click

from fleet.cli.context import global_options
from fleet.cli.runner import open_service, run_async

if TYPE_CHECKING:
    from fleet.service import Fleet


@click.command()
@click.option("--hosts", "--host", "pattern", metavar="PATTERN",
              help="Show (and monitor) only these hosts: names/globs, @group, label:key=value.")
@click.option("--interval", metavar="DURATION",
              help="Seconds between readings of each host by the monitor the UI starts "
                   "[settings: monitor.interval, 1s].")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key of hosts seen for the first time (trust on first use).")
@click.pass_context
def tui(ctx: click.Context, pattern: str | None, interval: str | None, accept_new: bool) -> int:
    """Open the full-screen fleet UI: hosts, GPUs, tasks, allocations, events, discovery.

    Keys: f fleet, t tasks, a allocations, e events, v discovery, d dispatch, ? help, q quit;
    Ctrl+P lists every action.

    \b
    Examples:
      fleet tui
      fleet -i lab.yaml tui --hosts '@a100' --interval 2s
      NO_COLOR=1 fleet tui
    """
    from fleet.cli.tui_launch import run_tui
    from fleet.errors import ConfigError
    from fleet.monitor.config import default_settings, with_interval

    options = global_options(ctx)
    if interval is not None:
        with_interval(default_settings(), interval)  # a bad value fails before anything opens

    async def run() -> int:
        async with open_service(options, accept_new=accept_new) as service:
            # a pattern matching no host is an error, not an empty screen
            await service.managed_hosts(pattern)
            if service.remote:  # the lab's shared view: the server's one monitor
                if interval is not None:
                    raise ConfigError("--interval: through fleet serve the server's monitor "
                                      "reads the hosts (its monitor.interval setting)")
                return await run_tui(service, hosts=pattern)
            fleet = cast("Fleet", service)
            settings = fleet.monitor_settings()
            if interval is not None:
                settings = with_interval(settings, interval)
            return await run_tui(fleet, hosts=pattern, settings=settings)

    return run_async(run)


@click.command()
@click.option("--text", "text_rounds", type=click.IntRange(1, 1000), metavar="ROUNDS",
              help="Print ROUNDS rounds of `fleet status` text instead of opening the UI.")
@click.option("--db", "db_url", metavar="URL",
              help="Record the demo in this database (kept) instead of a temporary SQLite file; "
                   "$FLEET_DB is not used, so a demo never fills your real database.")
@click.pass_context
def demo(ctx: click.Context, text_rounds: int | None, db_url: str | None) -> int:
    """Run a simulated GPU fleet on this machine and open the UI on it (no GPU, no root).

    Eight hosts served over real SSH on 127.0.0.1 with simulated GPUs whose load, memory and
    temperature drift; one host drops out and returns, one GPU overheats. Quitting (q) cancels
    the tasks you dispatched and removes everything, a temporary directory included.

    \b
    Examples:
      fleet demo
      fleet demo --text 3
      fleet demo --db postgresql+psycopg://fleet@db/fleet_demo
    """
    from fleet.cli.tui_launch import run_tui
    from fleet.demo import demo_session, exit_on_hangup, print_status_rounds

    async def run() -> int:
        async with demo_session(db_url=db_url or _explicit_db(ctx)) as session:
            if text_rounds is not None:
                await print_status_rounds(session, text_rounds)
                return 0
            return await run_tui(session.fleet, scripts=session.scripts)

    with exit_on_hangup():
        return run_async(run)


def _explicit_db(ctx: click.Context) -> str | None:
    """`fleet --db URL demo`: the global --db when given on the command line (not $FLEET_DB)."""
    from click.core import ParameterSource

    parent = ctx.parent
    if parent is None or parent.get_parameter_source("db_url") != ParameterSource.COMMANDLINE:
        return None
    value = parent.params.get("db_url")
    return value if isinstance(value, str) else None
