"""`fleet history`: recorded samples over a time range, raw or bucketed, as table/JSON/CSV."""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json, global_options
from fleet.cli.history_hosts_cmd import history_hosts
from fleet.cli.runner import run_async

if TYPE_CHECKING:
    from db.types import GpuHistoryPoint


@click.group()
def history() -> None:
    """Query recorded history (samples are kept in the database)."""


history.add_command(history_hosts)


@history.command("gpus")
@click.option("--host", metavar="NAME", help="Only this host's GPUs.")
@click.option("--gpu", metavar="UUID|HOST:IDX", help="Only this GPU.")
@click.option("--since", default="1h", show_default=True, metavar="TIME",
              help="Start: a duration ago (2h), an ISO time, or epoch seconds.")
@click.option("--until", default="now", show_default=True, metavar="TIME", help="End time.")
@click.option("--bucket", metavar="DURATION",
              help="Aggregate per bucket (e.g. 1m, 1h): averages and maxima.")
@click.option("--limit", type=click.IntRange(1), metavar="N", help="At most N rows.")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]),
              default=None, help="Output format [default: table, or json with --json].")
@click.pass_context
def history_gpus(ctx: click.Context, host: str | None, gpu: str | None, since: str, until: str,
                 bucket: str | None, limit: int | None, output_format: str | None) -> int:
    """GPU samples (utilisation, memory, temperature, power) over time.

    \b
    Examples:
      fleet history gpus --since 2h
      fleet history gpus --host gpu01 --since 1d --bucket 1h --format csv > gpu01.csv
      fleet history gpus --gpu gpu01:3 --since 2026-11-30T08:00 --until 2026-11-30T12:00
    """
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_range

    options = global_options(ctx)
    since_epoch, until_epoch, bucket_s = parse_range(since, until, bucket, now=time.time())

    async def run() -> list[GpuHistoryPoint]:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            return await service.gpu_history(since=since_epoch, until=until_epoch, host=host,
                                             gpu=gpu, bucket_s=bucket_s, limit=limit)

    points = run_async(run)
    chosen = output_format or ("json" if options.as_json else "table")
    rows = [_point_dict(point) for point in points]
    if chosen == "json":
        echo_json({"since": since_epoch, "until": until_epoch, "bucket_s": bucket_s,
                   "points": rows})
    elif chosen == "csv":
        click.echo(_to_csv(rows), nl=False)
    else:
        click.echo(_to_table(rows))
    return 0


def _point_dict(point: GpuHistoryPoint) -> dict[str, Any]:
    return dataclasses.asdict(point)


def _to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def _to_table(rows: list[dict[str, Any]]) -> str:
    from fleet.cli.table import Column, render_table
    from fleet.timeparse import format_time

    if not rows:
        return "no samples in that time range"
    keys = [key for key in rows[0] if key not in ("ts_ms",)]
    columns = [Column(key.upper(), "<" if key in ("host", "uuid", "name", "time") else ">")
               for key in ["time", *keys]]
    table_rows = [[format_time(row["ts_ms"] / 1000), *(_cell(row[key]) for key in keys)]
                  for row in rows]
    return render_table(columns, table_rows)


def _cell(value: object) -> object:
    if isinstance(value, float):
        return f"{value:.1f}"
    return value
