"""`fleet history hosts`: recorded host load, CPU, memory and network over time, raw or bucketed."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import click

from fleet.cli.context import (
    echo_json,
    global_options,
    host_option,
    json_option,
    output_format_of,
)
from fleet.cli.history_limits import LIMIT_HELP, cut, probe_limit, shown_limit
from fleet.cli.runner import open_service, run_async
from fleet.probe.limits import MAX_INT

if TYPE_CHECKING:
    from fleet.records import HostHistoryPoint


@click.command("hosts")
@host_option("Only this host.", name="host", metavar="NAME")
@click.option("--since", default="1h", show_default=True, metavar="TIME",
              help="Start: a duration ago (2h), an ISO time, or epoch seconds.")
@click.option("--until", default="now", show_default=True, metavar="TIME",
              help="End time, exclusive (since <= time < until).")
@click.option("--bucket", metavar="DURATION",
              help="Aggregate per bucket (e.g. 1m, 1h): averages, maxima, network rates.")
@click.option("--limit", type=click.IntRange(1, MAX_INT), metavar="N", help=LIMIT_HELP)
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]),
              default=None, help="Output format [default: table, or json with --json].")
@json_option
@click.pass_context
def history_hosts(ctx: click.Context, host: str | None, since: str, until: str,
                  bucket: str | None, limit: int | None, output_format: str | None) -> int:
    """Host samples (load, CPU busy, memory available, network) over time.

    Raw samples are kept for the retention period (retention.raw_days, default 7 days).
    Network rates are each counter's increase per second within the bucket; a counter that
    went down (a reboot) counts from 0. Row bounds as in `fleet history gpus`: at most 10000
    raw samples or 100000 buckets unless --limit says otherwise, stderr saying when cut.

    \b
    Examples:
      fleet history hosts --since 2h
      fleet history hosts --hosts gpu01 --since 1d --bucket 10m
      fleet history hosts --since 6h --bucket 1m --format csv > hosts.csv
    """
    from fleet.render.history import render_host_history, rows_to_csv
    from fleet.timeparse import parse_range

    options = global_options(ctx)
    chosen = output_format_of(options, output_format)  # before any work
    since_epoch, until_epoch, bucket_s = parse_range(since, until, bucket, now=time.time())
    shown = shown_limit(limit, bucket_s)

    async def run() -> list[HostHistoryPoint]:
        async with open_service(options) as service:
            return await service.host_history(since=since_epoch, until=until_epoch, host=host,
                                              bucket_s=bucket_s, limit=probe_limit(shown))

    points, truncated = cut(run_async(run), shown, bucket_s)
    rows = [dataclasses.asdict(point) for point in points]
    if chosen == "json":
        echo_json({"since": since_epoch, "until": until_epoch, "bucket_s": bucket_s,
                   "truncated": truncated, "points": rows})
    elif chosen == "csv":
        click.echo(rows_to_csv(rows), nl=False)
    else:
        click.echo(render_host_history(points))
    return 0
