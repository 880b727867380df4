"""The `fleet` command: global options, subcommand registry and error-to-exit-code mapping.

Imports stay light (click only): `fleet --help` must start fast; no command imports textual.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleet import __version__
from fleet.cli.context import GlobalOptions
from fleet.cli.db_cmd import db_group
from fleet.cli.discover_cmd import adopt, announce, candidates, discover
from fleet.cli.dispatch_cmd import dispatch
from fleet.cli.drain_cmd import drain, undrain
from fleet.cli.events_cmd import events
from fleet.cli.history_cmd import history
from fleet.cli.hosts_cmd import hosts
from fleet.cli.inventory_cmd import inventory
from fleet.cli.monitor_cmd import config, monitor
from fleet.cli.reserve_cmd import allocations, release, reserve
from fleet.cli.run_cmd import run
from fleet.cli.serve_cmd import serve
from fleet.cli.status_cmd import status
from fleet.cli.tasks_cmd import cancel, logs, tasks
from fleet.cli.tui_cmd import demo, tui
from fleet.cli.usage_cmd import usage
from fleet.cli.web_cmd import web
from fleet.errors import FleetError
from fleet.render.exit_codes import EXIT_INTERRUPTED, render_exit_codes

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS, epilog="\b\nExit codes:\n" + render_exit_codes())
@click.option(
    "--db",
    "db_url",
    envvar="FLEET_DB",
    metavar="URL",
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


cli.add_command(inventory)
cli.add_command(hosts)
cli.add_command(status)
cli.add_command(monitor)
cli.add_command(config)
cli.add_command(history)
cli.add_command(events)
cli.add_command(usage)
cli.add_command(drain)
cli.add_command(undrain)
cli.add_command(db_group)
cli.add_command(reserve)
cli.add_command(release)
cli.add_command(allocations)
cli.add_command(dispatch)
cli.add_command(tasks)
cli.add_command(logs)
cli.add_command(cancel)
cli.add_command(run)
cli.add_command(discover)
cli.add_command(candidates)
cli.add_command(adopt)
cli.add_command(announce)
cli.add_command(tui)
cli.add_command(demo)
cli.add_command(serve)
cli.add_command(web)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; FleetErrors become a message on stderr and their documented exit code."""
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


def _show_usage_error(exc: click.UsageError) -> None:
    """`fleet: error: MESSAGE` like every other error, then the usage line and where help is."""
    click.echo(f"fleet: error: {exc.format_message()}", err=True)
    if exc.ctx is not None:
        click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)


if __name__ == "__main__":
    sys.exit(main())
