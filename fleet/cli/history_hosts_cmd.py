"""`fleet history hosts`: recorded host load, CPU, memory and network over time, raw or bucketed."""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json, global_options

if TYPE_CHECKING:
    from db.host_history import HostHistoryPoint


@click.command("hosts")
@click.option("--host", metavar="NAME", help="Only this host.")
@click.option("--since", default="1h", show_default=True, metavar="TIME",
              help="Start: a duration ago (2h), an ISO time, or epoch seconds.")
@click.option("--until", default="now", show_default=True, metavar="TIME", help="End time.")
@click.option("--bucket", metavar="DURATION",
              help="Aggregate per bucket (e.g. 1m, 1h): averages, maxima, network rates.")
@click.option("--limit", type=click.IntRange(1), metavar="N", help="At most N rows.")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]),
              default=None, help="Output format [default: table, or json with --json].")
@click.pass_context
def history_hosts(ctx: click.Context, host: str | None, since: str, until: str,
                  bucket: str | None, limit: int | None, output_format: str | None) -> int:
    """Host samples (load, CPU busy, memory available, network) over time.

    Raw samples are kept for the retention period (default 7 days).

    \b
    Examples:
      fleet history hosts --since 2h
      fleet history hosts --host gpu01 --since 1d --bucket 10m
      fleet history hosts --since 6h --bucket 1m --format csv > hosts.csv
    """
    from db.errors import DatabaseError
    from db.host_history import host_history
    from fleet.errors import StorageError
    from fleet.service import open_database
    from fleet.timeparse import parse_range

    options = global_options(ctx)
    since_epoch, until_epoch, bucket_s = parse_range(since, until, bucket, now=time.time())
    database = open_database(options.db_url)
    try:
        with database.session() as session:
            points = host_history(session, since_ms=int(since_epoch * 1000),
                                  until_ms=int(until_epoch * 1000), host=host,
                                  bucket_s=bucket_s, limit=limit)
    except DatabaseError as exc:
        raise StorageError(f"database error: {exc}") from exc
    finally:
        database.close()
    rows = [dataclasses.asdict(point) for point in points]
    chosen = output_format or ("json" if options.as_json else "table")
    if chosen == "json":
        echo_json({"since": since_epoch, "until": until_epoch, "bucket_s": bucket_s,
                   "points": rows})
    elif chosen == "csv":
        click.echo(_to_csv(rows), nl=False)
    else:
        click.echo(_to_table(points))
    return 0


def _to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def _to_table(points: list[HostHistoryPoint]) -> str:
    from fleet.cli.table import Column, format_bytes, format_number, render_table
    from fleet.timeparse import format_time

    if not points:
        return "no samples in that time range"
    columns = [Column("TIME"), Column("HOST", max_width=32), Column("N", ">"),
               Column("LOAD1", ">"), Column("LOAD1_MAX", ">"), Column("CPU%", ">"),
               Column("CPU%_MAX", ">"), Column("MEM_AVAIL_MIN_GIB", ">"),
               Column("RX_MB/S", ">"), Column("TX_MB/S", ">")]
    return render_table(columns, [
        [format_time(p.ts_ms / 1000), p.host, p.samples, format_number(p.load_1m_avg, 2),
         format_number(p.load_1m_max, 2), format_number(p.cpu_busy_avg, 1),
         format_number(p.cpu_busy_max, 1), format_bytes(p.memory_available_min),
         format_number(None if p.net_rx_bps is None else p.net_rx_bps / 1e6, 2),
         format_number(None if p.net_tx_bps is None else p.net_tx_bps / 1e6, 2)]
        for p in points
    ])
