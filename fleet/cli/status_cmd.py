"""`fleet status`: probe hosts once, show every GPU, record the sample."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from fleet.cli.context import HOSTS_HELP, echo_json, global_options, host_option, json_option
from fleet.cli.runner import open_service, run_async
from fleet.render.exit_codes import EXIT_HOST_FAILED

if TYPE_CHECKING:
    from fleet.fanout import HostStatus


@click.command()
@host_option(HOSTS_HELP)
@click.option("--timeout", default="15s", show_default=True, metavar="DURATION",
              help="Deadline per host for connect + probe.")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key of hosts seen for the first time (trust on first use).")
@click.option("--no-record", is_flag=True, help="Do not write the samples to the database.")
@click.option("--fanout", default=128, show_default=True, type=click.IntRange(1, 4096),
              help="How many hosts to contact at once.")
@json_option
@click.pass_context
def status(ctx: click.Context, pattern: str | None, timeout: str, accept_new: bool,
           no_record: bool, fanout: int) -> int:
    """Probe hosts now and show every GPU; record what was seen.

    Exits 0 when every host answered, 3 when any host failed (its row says why).

    \b
    Examples:
      fleet status
      fleet status --hosts 'gpu0*,@a100' --timeout 5s
      fleet status --json | jq '.hosts[].gpus[].uuid'
    """
    from fleet.render.status_view import render_status, status_to_json
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    deadline = parse_duration(timeout, what="--timeout")
    show_progress = sys.stderr.isatty() and not options.as_json

    def progress(host_status: HostStatus, done: int, total: int) -> None:
        if show_progress:
            click.echo(f"\rprobed {done}/{total} hosts", err=True, nl=done == total)

    async def run() -> list[HostStatus]:
        async with open_service(options, accept_new=accept_new) as service:
            return await service.status(pattern, timeout=deadline, record=not no_record,
                                        fanout=fanout, progress=progress)

    statuses = run_async(run)
    if options.as_json:
        echo_json(status_to_json(statuses))
    else:
        click.echo(render_status(statuses))
    failed = [s for s in statuses if not s.is_up]
    return EXIT_HOST_FAILED if failed else 0
