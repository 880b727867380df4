"""`fleet events`: recorded events (state changes, health alarms, drains), filtered, newest last."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import echo_json, global_options, host_option, json_option
from fleet.cli.runner import open_service, run_async
from fleet.probe.limits import MAX_INT

if TYPE_CHECKING:
    from fleet.records import EventView, Severity

SEVERITY_CHOICES = ("info", "warning", "error", "critical")


@click.command()
@click.option("--since", default="1d", show_default=True, metavar="TIME",
              help="Start: a duration ago (2h), an ISO time, or epoch seconds.")
@click.option("--until", default=None, metavar="TIME",
              help="End time, exclusive (since <= time < until) [default: now].")
@click.option("--severity", type=click.Choice(SEVERITY_CHOICES), default=None,
              help="This severity and worse.")
@host_option("Only events about this host.", name="host", metavar="NAME")
@click.option("--kind", metavar="KIND", help="Event kind, or a glob like 'gpu_*'.")
@click.option("--limit", type=click.IntRange(1, MAX_INT), default=100, show_default=True,
              metavar="N", help="At most the newest N events.")
@json_option
@click.pass_context
def events(ctx: click.Context, since: str, until: str | None, severity: str | None,
           host: str | None, kind: str | None, limit: int) -> int:
    """Show recorded events, oldest first (the newest N within the range).

    The range is half-open, as in `fleet history`: an event at --since is shown, one at
    --until is not (events are stamped in whole seconds).

    Kinds include host_down, host_up, gpu_hot, gpu_cooled, gpu_failed, gpu_degraded,
    gpu_recovered, gpu_count_changed, driver_version_changed, gpu_changed, host_drained,
    gpu_drained, host_undrained, gpu_undrained, hook_failed.

    \b
    Examples:
      fleet events
      fleet events --since 7d --severity warning
      fleet events --hosts gpu07 --kind 'gpu_*' --limit 20
      fleet events --since 1h --json | jq '.events[].message'
    """
    from typing import cast

    from fleet.errors import ConfigError
    from fleet.timeparse import parse_time

    options = global_options(ctx)
    now = time.time()
    since_epoch = parse_time(since, now=now, what="--since")
    until_epoch = None if until is None else parse_time(until, now=now, what="--until")
    if until_epoch is not None and until_epoch < since_epoch:
        raise ConfigError(f"--until ({until}) is before --since ({since})")

    # Events are stamped in whole seconds: since <= ts < until holds for exactly the seconds
    # from ceil(since) to ceil(until) - 1.
    async def run() -> list[EventView]:
        async with open_service(options) as service:
            return await service.events(
                since=math.ceil(since_epoch),
                until=None if until_epoch is None else math.ceil(until_epoch),
                severity=cast("Severity | None", severity), host=host, kind=kind, limit=limit)

    rows = run_async(run)
    if options.as_json:
        echo_json({"since": since_epoch, "until": until_epoch, "events": [_dict(r) for r in rows]})
    else:
        click.echo(_table(rows))
    return 0


def _dict(row: EventView) -> dict[str, Any]:
    return {"id": row.id, "ts": row.ts, "kind": row.kind, "severity": row.severity,
            "host": row.host, "gpu": row.gpu_idx, "gpu_uuid": row.gpu_uuid,
            "task_id": row.task_id, "message": row.message, "data": row.data}


def _table(rows: list[EventView]) -> str:
    from fleet.render.table import Column, render_table
    from fleet.timeparse import format_time

    if not rows:
        return "no events in that time range"
    columns = [Column("TIME"), Column("SEVERITY"), Column("KIND", max_width=28),
               Column("HOST", max_width=32), Column("GPU", ">"), Column("MESSAGE", max_width=100)]
    return render_table(columns, [
        [format_time(row.ts), row.severity, row.kind, row.host, row.gpu_idx, row.message]
        for row in rows
    ])
