"""The `fleet` command: global options, subcommand registry and error-to-exit-code mapping.

Imports stay light (click only): `fleet --help` must start fast; no command imports textual.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from fleet import __version__
from fleet.cli.context import GlobalOptions
from fleet.errors import FleetError
from fleet.render.exit_codes import EXIT_BAD_INPUT, EXIT_INTERRUPTED, render_exit_codes

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# Every subcommand: its name, then the module and attribute that define it. A module is imported
# only when its command runs (or `fleet --help` lists them all): `fleet status` spares the other
# commands' imports (~15 ms of every process).
COMMANDS: dict[str, tuple[str, str]] = {
    "inventory": ("fleet.cli.inventory_cmd", "inventory"),
    "hosts": ("fleet.cli.hosts_cmd", "hosts"),
    "status": ("fleet.cli.status_cmd", "status"),
    "monitor": ("fleet.cli.monitor_cmd", "monitor"),
    "config": ("fleet.cli.monitor_cmd", "config"),
    "history": ("fleet.cli.history_cmd", "history"),
    "events": ("fleet.cli.events_cmd", "events"),
    "usage": ("fleet.cli.usage_cmd", "usage"),
    "drain": ("fleet.cli.drain_cmd", "drain"),
    "undrain": ("fleet.cli.drain_cmd", "undrain"),
    "db": ("fleet.cli.db_cmd", "db_group"),
    "reserve": ("fleet.cli.reserve_cmd", "reserve"),
    "release": ("fleet.cli.reserve_cmd", "release"),
    "allocations": ("fleet.cli.reserve_cmd", "allocations"),
    "dispatch": ("fleet.cli.dispatch_cmd", "dispatch"),
    "tasks": ("fleet.cli.tasks_cmd", "tasks"),
    "logs": ("fleet.cli.tasks_cmd", "logs"),
    "cancel": ("fleet.cli.tasks_cmd", "cancel"),
    "run": ("fleet.cli.run_cmd", "run"),
    "discover": ("fleet.cli.discover_cmd", "discover"),
    "candidates": ("fleet.cli.discover_cmd", "candidates"),
    "adopt": ("fleet.cli.discover_cmd", "adopt"),
    "announce": ("fleet.cli.discover_cmd", "announce"),
    "tui": ("fleet.cli.tui_cmd", "tui"),
    "demo": ("fleet.cli.tui_cmd", "demo"),
    "serve": ("fleet.cli.serve_cmd", "serve"),
    "web": ("fleet.cli.web_cmd", "web"),
}


class LazyGroup(click.Group):
    """A click group whose COMMANDS are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"{module_name}.{attribute} is not the command {cmd_name!r}")
        self.add_command(command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # suggest from every command, not the loaded
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None


def _given_database(value: str | None) -> str | None:
    """--db as given; an empty one is a usage error (it would mean the default database)."""
    if value is not None and not value.strip():
        raise click.BadParameter("empty database URL: give a file path or a URL",
                                 param_hint="'--db'")
    return value


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS,
             epilog="\b\nExit codes:\n" + render_exit_codes())
@click.option(
    "--db",
    "db_url",
    envvar="FLEET_DB",
    metavar="URL",
    callback=lambda _ctx, _param, value: _given_database(value),
    help="Database: a SQLAlchemy URL or a SQLite file path "
    "[env FLEET_DB; default ~/.local/share/fleet/fleet.db].",
)
@click.option(
    "--inventory",
    "-i",
    "inventory_path",
    envvar="FLEET_INVENTORY",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Inventory YAML (fleet or Ansible format) [env FLEET_INVENTORY; default "
    "./inventory.yaml, then ~/.config/fleet/inventory.yaml, else the local machine only].",
)
@click.option("--json", "as_json", is_flag=True,
              help="Print data as JSON on stdout (also accepted after the command).")
@click.option("--server", "server", metavar="PATH|ssh://[USER@]HOST[:PORT][/SOCKET]",
              help="Use the `fleet serve` on this socket, or on a head node over SSH ('local': "
              "none) [env FLEET_SERVER; settings serve.socket; default: a server on the default "
              "socket, else local].")
@click.version_option(__version__, "--version", "-V", prog_name="fleet")
@click.pass_context
def cli(ctx: click.Context, db_url: str | None, inventory_path: Path | None, as_json: bool,
        server: str | None) -> None:
    """See every GPU of a fleet, find the free ones, and keep their history.

    \b
    Examples:
      fleet status                         probe every host in the inventory
      fleet status --hosts 'gpu*' --json   machine-readable, a subset of hosts
      fleet history gpus --since 2h --bucket 5m
    """
    ctx.obj = GlobalOptions(db_url=db_url, inventory_path=inventory_path, as_json=as_json,
                            server=server)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; FleetErrors become a message on stderr and their documented exit code."""
    undecodable = _undecodable_argument(sys.argv[1:] if argv is None else argv)
    if undecodable is not None:
        click.echo(f"fleet: error: argument {undecodable} is not UTF-8 text; fleet records and "
                   "sends names, arguments and patterns as text", err=True)
        return EXIT_BAD_INPUT
    try:
        result = cli.main(args=argv, prog_name="fleet", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a group given no subcommand prints its help
        return int(exc.exit_code)
    except click.UsageError as exc:
        _show_usage_error(exc)
        return int(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"fleet: error: {exc.format_message()}", err=True)
        return int(exc.exit_code)
    except click.Abort:
        click.echo("fleet: interrupted", err=True)
        return EXIT_INTERRUPTED
    except FleetError as exc:
        click.echo(f"fleet: error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("fleet: interrupted", err=True)
        return EXIT_INTERRUPTED
    return result if isinstance(result, int) else 0


def _undecodable_argument(args: list[str]) -> str | None:
    """The first argument holding bytes that are not UTF-8 (Python keeps them as surrogate
    escapes), shown with its position, or None: such text can be stored in neither database
    nor sent to a server, so it is refused here, the same in every mode."""
    for position, arg in enumerate(args, start=1):
        if any("\udc80" <= char <= "\udcff" for char in arg):
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return f"{position} ('{shown}')"
    return None


def _show_usage_error(exc: click.UsageError) -> None:
    """`fleet: error: MESSAGE` like every other error, then the usage line and where help is."""
    click.echo(f"fleet: error: {exc.format_message()}", err=True)
    if exc.ctx is not None:
        click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)


if __name__ == "__main__":
    sys.exit(main())
