"""Global CLI options passed to every subcommand, and helpers to print data or errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click


@dataclass(frozen=True)
class GlobalOptions:
    """Options given before the subcommand (`fleet --db URL --json status`)."""

    db_url: str | None
    inventory_path: Path | None
    as_json: bool


def global_options(ctx: click.Context) -> GlobalOptions:
    """The GlobalOptions of the root command."""
    options = ctx.find_object(GlobalOptions)
    if options is None:
        return GlobalOptions(db_url=None, inventory_path=None, as_json=False)
    return options


def echo_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def warn(message: str) -> None:
    """Print a warning line on stderr."""
    click.echo(f"fleet: warning: {message}", err=True)
