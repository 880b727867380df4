"""`fleet usage`: GPU-hours held and busy, efficiency, tasks, failures and waits per user."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from fleet.cli.context import echo_json, global_options, json_option, output_format_of
from fleet.cli.runner import open_service, run_async

if TYPE_CHECKING:
    from fleet.services.usage import UsageReport

BY_CHOICES = ("user", "group", "host", "gpu-model")
FORMATS = ("table", "json", "csv")


@click.command()
@click.option("--since", default="30d", show_default=True, metavar="TIME",
              help="Start: a duration ago (7d), an ISO time, or epoch seconds.")
@click.option("--until", default=None, metavar="TIME", help="End time [default: now].")
@click.option("--by", "by", type=click.Choice(BY_CHOICES), default="user", show_default=True,
              help="One row per user, Unix group (a user counts in each of theirs), host or "
                   "GPU model.")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="Output format [default: table, or json with --json].")
@json_option
@click.pass_context
def usage(ctx: click.Context, since: str, until: str | None, by: str,
          output_format: str | None) -> int:
    """Show who used how much GPU time, and how well, from the stored history.

    GPU-hours held (tasks and reservations, cut to the window; an active one counts until
    now), busy GPU-hours (each minute held weighted by the GPU's average utilisation; a minute
    without samples counts as not busy), efficiency (busy / held), tasks submitted, failures
    (failed, lost or timed out), the median queue wait, reservations and how much of them was
    busy. The same figures per day are in the SQL view `usage_daily`.

    \b
    Examples:
      fleet usage
      fleet usage --since 7d --by group
      fleet usage --since 2026-11-01 --until 2026-12-01 --by gpu-model --format csv > nov.csv
      fleet usage --json | jq '.usage[] | select(.efficiency < 0.3) | .key'
    """
    from fleet.errors import ConfigError
    from fleet.render.usage import usage_csv, usage_json, usage_table
    from fleet.timeparse import parse_time

    options = global_options(ctx)
    now = time.time()
    since_epoch = parse_time(since, now=now, what="--since")
    until_epoch = None if until is None else parse_time(until, now=now, what="--until")
    if until_epoch is not None and until_epoch <= since_epoch:
        raise ConfigError(f"--until ({until}) is not after --since ({since})")

    async def run() -> UsageReport:
        async with open_service(options) as service:
            return await service.usage(since=since_epoch, until=until_epoch, by=by)

    chosen = output_format_of(options, output_format)
    report = run_async(run)
    if chosen == "json":
        echo_json(usage_json(report))
    elif chosen == "csv":
        click.echo(usage_csv(report), nl=False)
    else:
        click.echo(usage_table(report))
    return 0
