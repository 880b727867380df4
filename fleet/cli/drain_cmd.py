"""`fleet drain` / `fleet undrain`: keep new work off a host or one GPU, or allow it again."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from fleet.cli.context import echo_json, global_options, json_option
from fleet.cli.runner import open_service, run_async

if TYPE_CHECKING:
    from fleet.health.drain import DrainOutcome


def _apply(ctx: click.Context, target: str, drained: bool, reason: str | None) -> int:

    options = global_options(ctx)

    async def run() -> DrainOutcome:
        async with open_service(options) as service:
            if drained:
                return await service.drain(target, reason)
            return await service.undrain(target)

    outcome = run_async(run)
    if options.as_json:
        echo_json({"target": outcome.target, "host": outcome.host, "gpu": outcome.gpu_index,
                   "drained": outcome.drained, "changed": outcome.changed,
                   "reason": outcome.reason, "event_id": outcome.event_id})
    else:
        verb = "drained" if drained else "undrained"
        if outcome.changed:
            detail = f" ({outcome.reason})" if outcome.reason else ""
            click.echo(f"{verb} {outcome.target}{detail}")
        else:
            click.echo(f"{outcome.target} was already {verb}; nothing changed")
    return 0


@click.command()
@click.argument("target", metavar="HOST[:GPU]")
@click.option("--reason", metavar="TEXT", help="Why (shown in `fleet hosts`, events, the TUI).")
@json_option
@click.pass_context
def drain(ctx: click.Context, target: str, reason: str | None) -> int:
    """Keep new work off a host, or one GPU (HOST:INDEX or a GPU UUID).

    Running work is not touched. Works on hosts the database knows (after `fleet status` or
    `fleet monitor`); an unknown host or GPU exits 2. Each change is recorded as an event.

    \b
    Examples:
      fleet drain gpu07 --reason "fan replacement"
      fleet drain gpu07:3 --reason "ECC errors, RMA pending"
      fleet drain --json GPU-8f2c1d7e-... --reason flaky
    """
    return _apply(ctx, target, True, reason)


@click.command()
@click.argument("target", metavar="HOST[:GPU]")
@json_option
@click.pass_context
def undrain(ctx: click.Context, target: str) -> int:
    """Allow new work on a drained host or GPU again.

    \b
    Examples:
      fleet undrain gpu07
      fleet undrain gpu07:3
    """
    return _apply(ctx, target, False, None)
