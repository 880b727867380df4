"""Global CLI options passed to every subcommand, and helpers to print data or errors."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_JSON_AFTER_COMMAND = "fleet.json_after_command"
# Compact JSON from this size up is indented by msgspec (see indented_json); below it, json's
# own indenting costs less than importing msgspec.
FAST_INDENT_MIN_CHARS = 64 * 1024


@dataclasses.dataclass(frozen=True)
class GlobalOptions:
    """Options given before the subcommand (`fleet --db URL --json status`)."""

    db_url: str | None
    inventory_path: Path | None
    as_json: bool
    server: str | None = None  # --server: a fleet serve socket, or "local"


def global_options(ctx: click.Context) -> GlobalOptions:
    """The GlobalOptions of the root command; `--json` given after the subcommand counts too."""
    options = ctx.find_object(GlobalOptions)
    if options is None:
        options = GlobalOptions(db_url=None, inventory_path=None, as_json=False)
    if ctx.meta.get(_JSON_AFTER_COMMAND):
        options = dataclasses.replace(options, as_json=True)
    return options


def _remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_JSON_AFTER_COMMAND] = True


def json_option(command: F) -> F:
    """Accept `--json` after the subcommand: `fleet status --json` is `fleet --json status`."""
    option = click.option("--json", is_flag=True, expose_value=False, callback=_remember_json,
                          help="Print data as JSON on stdout (same as `fleet --json …`).")
    return option(command)


def host_option(help_text: str, *, name: str = "pattern",
                metavar: str = "PATTERN") -> Callable[[F], F]:
    """`--hosts` (alias `--host`), the option that selects hosts, as parameter `name`."""
    return click.option("--hosts", "--host", name, metavar=metavar, help=help_text)


HOSTS_HELP = "Comma-separated host names/globs, @group or label:key=value."


def not_empty(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: an option's text as given, refused when given empty (`--python ''` names no
    program; the inventory refuses the same)."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", param=param)
    return value


def output_format_of(options: GlobalOptions, output_format: str | None) -> str:
    """What a command with `--format` prints: that format, else json with --json, else table;
    --json with another --format is a usage error (exit 2), not one of them silently."""
    if options.as_json and output_format not in (None, "json"):
        raise click.UsageError(f"--json and --format {output_format} ask for different output")
    return output_format or ("json" if options.as_json else "table")


def echo_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    click.echo(indented_json(data))


def indented_json(data: Any) -> str:
    """The text of json.dumps(data, indent=2, default=str), made faster for large answers.

    `indent` turns json's C encoder off (16 ms of pure Python for 64 hosts' status, 526 KB).
    Large answers are encoded compactly by the C encoder and re-indented by msgspec, which
    keeps every token as written: the same bytes in 3.6 ms. NaN and Infinity, which json
    writes and msgspec does not read, go the json way.
    """
    try:
        compact = json.dumps(data, default=str, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or Infinity, which msgspec would not read back: json's way
        return json.dumps(data, indent=2, default=str)
    if len(compact) < FAST_INDENT_MIN_CHARS:
        return json.dumps(data, indent=2, default=str)
    import msgspec

    return msgspec.json.format(compact, indent=2)


def warn(message: str) -> None:
    """Print a warning line on stderr."""
    click.echo(f"fleet: warning: {message}", err=True)
