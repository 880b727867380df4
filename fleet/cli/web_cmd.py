"""`fleet web`: a `fleet serve`'s web view on this machine, with no port open on the server."""

from __future__ import annotations

import os
import sys

import click

from fleet.cli.context import global_options
from fleet.cli.runner import run_async
from fleet.cli.signals import stop_on_signals


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Local port to listen on, on 127.0.0.1 (0: any free port).")
@click.option("--no-browser", is_flag=True, help="Only print the link; do not open a browser.")
@click.option("--accept-new", is_flag=True,
              help="Pin the head node's host key if it is seen for the first time (ssh://).")
@click.pass_context
def web(ctx: click.Context, port: int, no_browser: bool, accept_new: bool) -> int:
    """Show the server's web view in a browser, through its socket or an SSH tunnel.

    Listens on 127.0.0.1:PORT on this machine and forwards the web view's pages (and nothing
    else) to the `fleet serve` that `--server` selects: its Unix socket here, or over SSH to a
    head node (`--server ssh://head`), so the server needs no open port. Prints a link with a
    random token (other users of this machine cannot use the port without it) and opens the
    browser when there is a display. Ctrl-C or SIGTERM stops it; exit 9 when no server
    answers.

    \b
    Examples:
      fleet web
      fleet --server ssh://alice@head web --port 8080
    """
    options = global_options(ctx)

    async def run() -> None:
        from fleet.client.select import select_server
        from fleet.errors import ServerUnavailable
        from fleet.web.forward import forward

        choice = select_server(options.server)
        if choice is None:
            raise ServerUnavailable("fleet web needs a fleet serve: give --server PATH or "
                                    "ssh://[USER@]HOST, or start `fleet serve` here")
        async with stop_on_signals() as stop:
            if choice.head_node is None:
                async with forward(choice.socket_path, port, str(choice.socket_path)) as site:
                    _announce(site.url, no_browser)
                    await stop.wait()
                return
            from fleet.client.ssh_tunnel import open_tunnel

            url = choice.url or choice.head_node.host
            async with open_tunnel(choice.head_node, choice.socket_path, url,
                                   accept_new=accept_new) as tunnel, \
                    forward(tunnel, port, url) as site:
                _announce(site.url, no_browser)
                await stop.wait()

    run_async(run)
    click.echo("fleet: web view closed", err=True)
    return 0


def _announce(url: str, no_browser: bool) -> None:
    """Print the link (stdout: it may be piped) and open it where a browser can show it."""
    click.echo(url)
    sys.stdout.flush()
    click.echo("fleet: forwarding the web view; Ctrl-C stops", err=True)
    graphical = sys.platform == "darwin" or bool(os.environ.get("DISPLAY")
                                                 or os.environ.get("WAYLAND_DISPLAY"))
    if not no_browser and graphical:  # never a text browser taking over this terminal
        import webbrowser

        webbrowser.open(url)
