"""`fleet history`: recorded samples over a time range, raw or bucketed, as table/JSON/CSV."""

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
from fleet.cli.history_hosts_cmd import history_hosts
from fleet.cli.history_limits import LIMIT_HELP, cut, probe_limit, shown_limit
from fleet.cli.runner import open_service, run_async
from fleet.probe.limits import MAX_INT

if TYPE_CHECKING:
    from fleet.records import GpuHistoryPoint


@click.group()
def history() -> None:
    """Query recorded history (samples are kept in the database)."""


history.add_command(history_hosts)


@history.command("gpus")
@host_option("Only this host's GPUs.", name="host", metavar="NAME")
@click.option("--gpu", metavar="UUID|HOST:IDX", help="Only this GPU.")
@click.option("--since", default="1h", show_default=True, metavar="TIME",
              help="Start: a duration ago (2h), an ISO time, or epoch seconds.")
@click.option("--until", default="now", show_default=True, metavar="TIME",
              help="End time, exclusive (since <= time < until).")
@click.option("--bucket", metavar="DURATION",
              help="Aggregate per bucket (e.g. 1m, 1h): averages and maxima.")
@click.option("--limit", type=click.IntRange(1, MAX_INT), metavar="N", help=LIMIT_HELP)
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]),
              default=None, help="Output format [default: table, or json with --json].")
@json_option
@click.pass_context
def history_gpus(ctx: click.Context, host: str | None, gpu: str | None, since: str, until: str,
                 bucket: str | None, limit: int | None, output_format: str | None) -> int:
    """GPU samples (utilisation, memory, temperature, power) over time.

    Tables show memory in GiB; JSON and CSV keep bytes. At most 10000 raw samples or 100000
    buckets are shown unless --limit says otherwise; when the range holds more, stderr says
    so (and JSON's "truncated" is true). Through `fleet serve` one command gets at most 100000.

    \b
    Examples:
      fleet history gpus --since 2h
      fleet history gpus --hosts gpu01 --since 1d --bucket 1h --format csv > gpu01.csv
      fleet history gpus --gpu gpu01:3 --since 2026-11-30T08:00 --until 2026-11-30T12:00
    """
    from fleet.render.history import render_gpu_history, rows_to_csv
    from fleet.timeparse import parse_range

    options = global_options(ctx)
    chosen = output_format_of(options, output_format)  # before any work
    since_epoch, until_epoch, bucket_s = parse_range(since, until, bucket, now=time.time())
    shown = shown_limit(limit, bucket_s)

    async def run() -> list[GpuHistoryPoint]:
        async with open_service(options) as service:
            return await service.gpu_history(since=since_epoch, until=until_epoch, host=host,
                                             gpu=gpu, bucket_s=bucket_s,
                                             limit=probe_limit(shown))

    points, truncated = cut(run_async(run), shown, bucket_s)
    if chosen == "json":
        echo_json({"since": since_epoch, "until": until_epoch, "bucket_s": bucket_s,
                   "truncated": truncated,
                   "points": [dataclasses.asdict(point) for point in points]})
    elif chosen == "csv":
        click.echo(rows_to_csv([dataclasses.asdict(point) for point in points]), nl=False)
    else:
        click.echo(render_gpu_history(points))
    return 0
