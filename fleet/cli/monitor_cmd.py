"""`fleet monitor` (watch hosts continuously, record history) and `fleet config show`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleet.cli.context import HOSTS_HELP, global_options, host_option, json_option
from fleet.cli.runner import run_async
from fleet.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from fleet.monitor.config import Settings
    from fleet.monitor.summary import MonitorSummary
    from fleet.server.locks import ServerLock
    from fleet.service import Fleet

LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 5


@click.command()
@host_option(HOSTS_HELP)
@click.option("--interval", metavar="DURATION",
              help="Seconds between readings of each host [settings: monitor.interval, 1s].")
@click.option("-q", "--quiet", is_flag=True, help="No per-interval summary line.")
@click.option("--log-file", type=click.Path(path_type=Path, dir_okay=False),
              help="Also log to FILE (mode 0600, rotated at 10 MB, 5 kept).")
@click.option("--http", "http_address", metavar="ADDR:PORT",
              help="Serve /status (JSON) and /metrics (Prometheus) on ADDR:PORT (loopback).")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key of hosts seen for the first time (trust on first use).")
@json_option
@click.pass_context
def monitor(ctx: click.Context, pattern: str | None, interval: str | None, quiet: bool,
            log_file: Path | None, http_address: str | None, accept_new: bool) -> int:
    """Watch hosts continuously and record every sample until SIGINT/SIGTERM.

    One SSH connection and one long-lived probe per host; samples are written in batches;
    health rules turn what is seen into events. Prints one summary line per interval
    (or one JSON object per line with --json). On SIGINT/SIGTERM it writes what is buffered,
    stops every remote probe and exits 0. One process records a database: beside another
    `fleet monitor` or a `fleet serve` on it, this exits 2 naming that process.

    \b
    Examples:
      fleet monitor
      fleet monitor --hosts '@a100' --interval 5s -q --log-file ~/fleet-monitor.log
      fleet monitor --http 127.0.0.1:9400     # then: curl -s localhost:9400/metrics
    """
    from fleet.monitor.config import with_interval

    options = global_options(ctx)
    _setup_logging(log_file, quiet)

    def summary(line: MonitorSummary) -> None:
        if options.as_json:
            import json

            # Its fields are plain numbers: vars() is the dict asdict() would deep-copy, every
            # interval.
            click.echo(json.dumps(vars(line)))
        elif not quiet:
            click.echo(line.line())

    async def run() -> None:
        import asyncio

        from fleet.errors import StorageError
        from fleet.server.locks import recorder_lock
        from fleet.service import open as open_fleet

        async with open_fleet(options.db_url, options.inventory_path,
                              accept_new=accept_new) as service:
            settings = service.monitor_settings()
            if interval is not None:
                settings = with_interval(settings, interval)
            lock = recorder_lock(service.database)  # one recorder per database
            if lock is not None:
                await asyncio.to_thread(lock.acquire)
            try:
                taken_by = await monitor_until_stopped(service, settings, lock)
            finally:
                if lock is not None:
                    await asyncio.to_thread(lock.release)
            if taken_by is not None:
                raise StorageError(f"{taken_by} took this database's recorder lock while this "
                                   "monitor's database session was gone; stopped recording")

    async def monitor_until_stopped(service: Fleet, settings: Settings,
                                    lock: ServerLock | None) -> str | None:
        import asyncio
        import contextlib

        from fleet.server.locks import PostgresRecorderLock, hold_until_stopped

        site = None
        keeper: asyncio.Task[str | None] | None = None  # keeps a PostgreSQL lock ours
        taken_by: str | None = None
        async with stop_on_signals() as stop:
            monitor = await service.start_monitor(pattern, settings=settings,
                                                  on_summary=summary)
            if isinstance(lock, PostgresRecorderLock):
                keeper = asyncio.create_task(hold_until_stopped(lock, stop))
            try:
                if http_address is not None:
                    from fleet.server.status_site import (
                        parse_listen_address,
                        start_status_site,
                    )

                    host, port = parse_listen_address(http_address)
                    site = await start_status_site(host, port, snapshot=monitor.snapshot,
                                                   extra_metrics=monitor.writer_metrics)
                    click.echo(f"fleet: serving /status and /metrics on "
                               f"http://{site.host}:{site.port}", err=True)
                click.echo(f"fleet: monitoring {len(monitor.specs)} hosts every "
                           f"{settings.monitor.interval:g}s (Ctrl-C to stop)", err=True)
                await stop.wait()
            finally:
                if site is not None:
                    await site.close()
                await service.stop_monitor()
                if keeper is not None:
                    if not keeper.done():  # stopped by a signal (or a failure), not by it
                        keeper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        taken_by = await keeper
        written = monitor.writer.stats
        dropped = [f"{count} {what}" for count, what in (
            (written.dropped_reports, "readings"), (written.dropped_events, "events")) if count]
        lost = (f"; {' and '.join(dropped)} dropped while the database was unavailable"
                if dropped else "")
        click.echo(f"fleet: stopped; {written.gpu_samples} GPU samples and "
                   f"{written.host_samples} host samples written{lost}", err=True)
        return taken_by

    run_async(run)
    return 0


def _setup_logging(log_file: Path | None, quiet: bool) -> None:
    """Warnings to stderr (unless quiet); everything from INFO up to the rotating log file."""
    import logging
    import logging.handlers
    import os

    root = logging.getLogger("fleet")
    root.setLevel(logging.INFO)
    if not quiet:
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("fleet: %(levelname)s: %(message)s"))
        root.addHandler(console)
    if log_file is not None:
        path = log_file.expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        root.addHandler(handler)


@click.group()
def config() -> None:
    """Show fleet's settings (intervals, timeouts, health, hooks, retention)."""


@config.command()
@json_option
@click.pass_context
def show(ctx: click.Context) -> None:
    """Print every effective setting with its default, doc and origin.

    Settings come from built-in defaults, then $XDG_CONFIG_HOME/fleet/config.yaml (or the file
    named by $FLEET_CONFIG), then the inventory's `settings:` section. The YAML printed is a
    valid settings file.

    \b
    Examples:
      fleet config show
      fleet config show --json | jq .settings.monitor
    """
    from fleet.discovery.autoadopt import discovery_yaml
    from fleet.inventory import default_ssh_config_path, load_inventory
    from fleet.monitor.config import load_settings
    from fleet.monitor.render import settings_json, settings_yaml

    options = global_options(ctx)
    inventory = load_inventory(options.inventory_path, ssh_config=default_ssh_config_path())
    settings = load_settings(inventory)
    click.echo(settings_json(settings) if options.as_json
               else settings_yaml(settings) + discovery_yaml(settings), nl=False)
