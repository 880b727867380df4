"""`fleet hosts`: the inventory's hosts with their last known state from the database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from fleet.cli.context import HOSTS_HELP, echo_json, global_options, host_option, json_option
from fleet.cli.runner import open_service, run_async
from fleet.model import HostSpec
from fleet.render.table import Column, render_table

if TYPE_CHECKING:
    from fleet.records import HostRow

HOST_COLUMNS = (
    Column("NAME", max_width=32), Column("ADDRESS", max_width=40), Column("PORT", ">"),
    Column("USER"), Column("CONN"), Column("GROUPS", max_width=32), Column("LABELS", max_width=40),
)


def host_rows(specs: Sequence[HostSpec]) -> list[dict[str, Any]]:
    """Host specs as JSON-ready dicts."""
    return [
        {"name": s.name, "address": s.address, "port": s.port, "user": s.user,
         "connection": s.connection, "identity_file": s.identity_file,
         "ssh_config_identity_files": list(s.ssh_config_identity_files),
         "ssh_config_host": s.ssh_config_host, "python": s.python,
         "proxy_jump": s.proxy_jump, "groups": list(s.groups), "labels": dict(s.labels),
         "source": s.source}
        for s in specs
    ]


def render_hosts(specs: Sequence[HostSpec]) -> str:
    """Host specs as a table."""
    rows = [
        [s.name, s.address, s.port, s.user, s.connection, ",".join(s.groups) or None,
         ",".join(f"{k}={v}" for k, v in s.labels) or None]
        for s in specs
    ]
    return render_table(HOST_COLUMNS, rows)


def _state_text(row: HostRow | None) -> str:
    """A host's recorded state, and its drain (with the reason given) when it is drained."""
    if row is None:
        return "unknown"
    if not row.drained:
        return row.state
    return f"{row.state}, drained" + (f": {row.drain_reason}" if row.drain_reason else "")


@click.command()
@host_option(HOSTS_HELP)
@json_option
@click.pass_context
def hosts(ctx: click.Context, pattern: str | None) -> int:
    """List hosts with their last recorded state (no probing; see `fleet status`).

    \b
    Examples:
      fleet hosts
      fleet hosts --hosts @a100
      fleet hosts --json
    """
    from fleet.timeparse import format_time

    options = global_options(ctx)

    async def run() -> tuple[tuple[HostSpec, ...], list[HostRow]]:
        async with open_service(options) as service:
            return await service.managed_hosts(pattern), await service.registered_hosts()

    specs, rows = run_async(run)
    known = {(row.address, row.port): row for row in rows}
    if options.as_json:
        data = host_rows(specs)
        for item, spec in zip(data, specs, strict=True):
            row = known.get(spec.key)
            item["state"] = row.state if row else "unknown"
            item["state_reason"] = row.state_reason if row else None
            item["drained"] = row.drained if row else False
            item["drain_reason"] = row.drain_reason if row else None
            item["gpu_count"] = row.gpu_count if row else None
            item["last_seen"] = row.last_seen if row else None
        echo_json({"hosts": data})
        return 0
    columns = (*HOST_COLUMNS, Column("STATE"), Column("GPUS", ">"), Column("LAST SEEN"))
    table = []
    for spec in specs:
        row = known.get(spec.key)
        table.append([
            spec.name, spec.address, spec.port, spec.user, spec.connection,
            ",".join(spec.groups) or None, ",".join(f"{k}={v}" for k, v in spec.labels) or None,
            _state_text(row), row.gpu_count if row else None,
            format_time(row.last_seen) if row and row.last_seen else None,
        ])
    click.echo(render_table(columns, table))
    return 0
