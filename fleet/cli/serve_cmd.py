"""`fleet serve`: one shared controller for a lab, serving the service API on a Unix socket."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleet.cli.context import HOSTS_HELP, echo_json, global_options, host_option, json_option
from fleet.cli.runner import run_async
from fleet.cli.signals import stop_on_signals

if TYPE_CHECKING:
    import logging


@click.command()
@click.option("--socket", "socket_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Socket to listen on [settings: serve.socket; default "
              "$XDG_RUNTIME_DIR/fleet/fleet.sock, else /tmp/fleet-$UID/fleet.sock].")
@click.option("--group", metavar="GROUP",
              help="Open the socket to this group (mode 0660); default: only you (0600).")
@host_option(HOSTS_HELP + " Hosts to monitor [default: every managed host].")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key of hosts seen for the first time (trust on first use).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.option("--web", "web_address", metavar="HOST:PORT",
              help="Also serve the read-only web view there (loopback, e.g. 127.0.0.1:8080; "
              "another address needs --web-token-file).")
@click.option("--web-token-file", type=click.Path(path_type=Path, dir_okay=False),
              help="File (mode 0600) holding the token the web view asks for: as "
              "`Authorization: Bearer TOKEN`, or once as ?token=TOKEN (then a cookie).")
@click.option("--status", "show_status", is_flag=True,
              help="Show which fleet serve leads the database and which stand by, then exit "
              "(0: one leads; 9: none does).")
@json_option
@click.pass_context
def serve(ctx: click.Context, socket_path: Path | None, group: str | None,
          pattern: str | None, accept_new: bool, quiet: bool, show_status: bool,
          web_address: str | None, web_token_file: Path | None) -> int:
    """Run one monitor, housekeeping and API for everyone, on a Unix socket.

    Clients (`fleet status`, `tasks`, `events`, `allocations`, `cancel`, `release`, `drain`...)
    use it when `--server PATH` or FLEET_SERVER names the socket, when `serve.socket` is set
    in the settings, or when the default socket exists. Callers are identified by the socket's
    peer credentials: a user may cancel and release only their own work; drain, undrain,
    adopt and acting on others' work need a group listed in `serve.admins` (default: the user
    running the server). SIGTERM/SIGINT stop it; tasks keep running on their hosts.

    On PostgreSQL, a second `fleet serve` on the same database (another machine, or another
    socket) is the standby: it answers reads and dispatches through the database's queue,
    and takes over within serve.leader_timeout + serve.standby_poll (6 s by default) when the
    leader dies, is cut off or freezes. A leader that loses its lock exits 4.

    \b
    Examples:
      fleet serve
      fleet serve --socket /run/fleet/fleet.sock --group gpu-users
      fleet serve --web 127.0.0.1:8080
      curl --unix-socket /run/fleet/fleet.sock http://fleet/v1/status
      fleet --db postgresql://fleet@dbhost/fleet serve --status
    """
    from fleet.server.serve import ServeOptions, run_server

    options = global_options(ctx)
    if show_status:
        return _show_status(options.db_url, options.as_json)
    _setup_logging(quiet)
    serve_options = ServeOptions(db_url=options.db_url, inventory_path=options.inventory_path,
                                 socket_path=socket_path, group=group, pattern=pattern,
                                 accept_new=accept_new, web_bind=web_address,
                                 web_token_file=web_token_file)
    if web_address is not None:  # a bad address or token fails now, before any host is read
        from fleet.web.auth import web_bind

        web_bind(web_address, web_token_file)

    def ready(path: Path, role: str) -> None:
        mode = f"group {group}, mode 0660" if group else "mode 0600"
        as_role = f" as the {role}" if role else ""
        click.echo(f"fleet: serving on {path} ({mode}){as_role}; SIGTERM or Ctrl-C stops",
                   err=True)

    async def run() -> None:
        async with stop_on_signals() as stop:
            await run_server(serve_options, stop, on_ready=ready)

    run_async(run)
    click.echo("fleet: server stopped; tasks keep running on their hosts", err=True)
    return 0


def _show_status(db_url: str | None, as_json: bool) -> int:
    """Print the database's controllers; ServerUnavailable (9) when none leads."""
    import dataclasses

    from fleet.errors import ServerUnavailable
    from fleet.server.pair_status import read_controllers

    shown, found = read_controllers(db_url)
    if as_json:
        echo_json({"database": shown,
                   "controllers": [dataclasses.asdict(found_one) for found_one in found]})
    else:
        for one in found:
            since = (f", epoch {one.epoch} since {_clock(one.since_s)}"
                     if one.epoch is not None and one.since_s is not None else "")
            click.echo(f"{one.role:8} pid {one.pid or '?'} on {one.host or '?'}{since}")
    if not any(one.role == "leader" for one in found):
        raise ServerUnavailable(f"no fleet serve leads {shown}")
    return 0


def _clock(epoch_s: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))


def _setup_logging(quiet: bool) -> None:
    """Warnings (info unless quiet) to stderr; a malformed request is one line, no traceback."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fleet: %(levelname)s: %(message)s"))
    handler.addFilter(_one_line)
    for name in ("fleet", "aiohttp"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR if quiet else logging.INFO if name == "fleet"
                        else logging.WARNING)
        logger.addHandler(handler)


def _one_line(record: logging.LogRecord) -> bool:
    """Keep client protocol errors (bad request lines, oversized heads) to their message."""
    if record.name.startswith("aiohttp.server") and record.exc_info:
        exc = record.exc_info[1]
        record.msg = f"{record.getMessage()}: {exc}".splitlines()[0]
        record.args = ()
        record.exc_info = None
    return True
