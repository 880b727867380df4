"""The mDNS discovery commands: `fleet discover`, `candidates`, `adopt` and `announce`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from fleet.cli.context import echo_json, global_options, json_option, warn
from fleet.cli.runner import run_async
from fleet.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from fleet.discovery.adopt import AdoptResult
    from fleet.discovery.candidates import CandidateView
    from fleet.services.discovery import DiscoveryOutcome

_INTERFACE_HELP = ("Interface to use: an IP address or an interface name (repeatable) "
                   "[default: settings.discovery.interfaces, else every interface].")


def _render_views(views: Sequence[CandidateView]) -> str:
    from fleet.render.table import Column, render_table

    columns = [Column("NAME", max_width=32), Column("ENDPOINT", max_width=48),
               Column("STATE"), Column("GPUS", ">"), Column("MODEL", max_width=32),
               Column("SESSION", max_width=24), Column("SERVICES", max_width=60),
               Column("NOTE", max_width=48)]
    rows = []
    for view in views:
        note = f"as {view.known_as}" if view.known_as else ""
        if view.problems:
            note = (note + "; " if note else "") + f"{len(view.problems)} TXT problem(s)"
        rows.append([view.name, view.endpoint, view.state, view.gpu_count, view.gpu_model,
                     view.session, ",".join(view.service_types), note or None])
    return render_table(columns, rows)


def _adopt_line(result: AdoptResult) -> str:
    from fleet.textsafe import safe_text

    where = f"{result.address}:{result.port}"
    if result.already_known_as:
        return (f"{safe_text(result.already_known_as)} ({where}) is already managed; host key "
                f"{result.key_type} {result.fingerprint} verified")
    verb = "auto-adopted" if result.auto else "adopted"
    key = "pinned" if result.newly_pinned else "already trusted"
    line = (f"{verb} {safe_text(result.name)} ({where}); host key {result.key_type} "
            f"{result.fingerprint} {key}")
    if result.inventory_path is not None:
        line += f"; added to {result.inventory_path}:{result.inventory_line}"
    return line


@click.command()
@click.option("--timeout", default="3s", show_default=True, metavar="DURATION",
              help="How long to listen for announcements.")
@click.option("--interface", "interfaces", multiple=True, metavar="ADDR|NAME",
              help=_INTERFACE_HELP)
@click.option("--session", metavar="NAME",
              help="List only hosts announcing this session (HW-SD sessions).")
@click.option("--type", "service_types", multiple=True, metavar="_NAME._tcp",
              help="Service type to browse (repeatable) [default: settings, else _ssh._tcp, "
                   "_sftp-ssh._tcp, _fleet._tcp, _gpu-sd._tcp, _net-sd._tcp, _hwgpus._tcp].")
@click.option("--no-record", is_flag=True,
              help="Do not store candidates (and never auto-adopt).")
@json_option
@click.pass_context
def discover(ctx: click.Context, timeout: str, interfaces: tuple[str, ...], session: str | None,
             service_types: tuple[str, ...], no_record: bool) -> int:
    """Listen for mDNS announcements once and list the hosts found.

    Hosts already in the inventory or database are shown as "known"; a host that said goodbye
    or no longer answers is "gone". Nothing is connected to: adopt a host with `fleet adopt`.
    With settings.discovery.auto_adopt in the inventory, new hosts of that session and subnet
    are adopted (their key pinned on first use) and listed as "adopted".

    \b
    Examples:
      fleet discover
      fleet discover --interface eth1 --timeout 5s --session lab-a
      fleet discover --json | jq '.hosts[] | select(.state == "new")'
    """
    from fleet.service import open as open_fleet
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    seconds = parse_duration(timeout, what="--timeout")

    async def run() -> DiscoveryOutcome:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            return await service.discover(timeout=seconds, interfaces=interfaces or None,
                                          session=session, service_types=service_types or None,
                                          record=not no_record)

    outcome = run_async(run)
    if options.as_json:
        echo_json({"hosts": [view.as_dict() for view in outcome.views],
                   "skipped": list(outcome.skipped),
                   "adopted": [result.as_dict() for result in outcome.adopted],
                   "refused": list(outcome.refused),
                   "elapsed_s": round(outcome.elapsed_s, 3)})
        return 0
    for reason in outcome.skipped:
        warn(f"skipped mDNS record {reason}")
    for message in outcome.refused:
        warn(f"auto-adopt refused {message}")
    if outcome.views:
        click.echo(_render_views(outcome.views))
    else:
        click.echo(f"no hosts announced themselves within {seconds:g}s")
    for result in outcome.adopted:
        click.echo(_adopt_line(result))
    return 0


@click.command()
@click.option("--session", metavar="NAME", help="Only hosts announcing this session.")
@click.option("--all", "include_gone", is_flag=True, help="Include hosts that are gone.")
@json_option
@click.pass_context
def candidates(ctx: click.Context, session: str | None, include_gone: bool) -> int:
    """List the hosts discovery has recorded (no network traffic).

    \b
    Examples:
      fleet candidates
      fleet candidates --all --session lab-a
    """
    from fleet.service import open as open_fleet

    options = global_options(ctx)

    async def run() -> list[CandidateView]:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            return await service.discovered_hosts(session=session, include_gone=include_gone)

    views = run_async(run)
    if options.as_json:
        echo_json({"hosts": [view.as_dict() for view in views]})
    elif views:
        click.echo(_render_views(views))
    else:
        click.echo("no candidates recorded; run `fleet discover`")
    return 0


@click.command()
@click.argument("target", metavar="NAME|ADDR[:PORT]")
@click.option("--accept-new", is_flag=True,
              help="Pin the host key shown (trust on first use). Without it an unknown key is "
                   "only shown, and the command fails.")
@click.option("--inventory-append", is_flag=True,
              help="Also add the host to the inventory file (its comments are kept).")
@click.option("--name", metavar="NAME", help="Name for the host [default: announced name].")
@click.option("--user", metavar="USER", help="Login user [default: ssh config, else yours].")
@json_option
@click.pass_context
def adopt(ctx: click.Context, target: str, accept_new: bool, inventory_append: bool,
          name: str | None, user: str | None) -> int:
    """Trust a discovered host: verify and pin its SSH host key, then manage it.

    The host key is fetched without logging in. An unknown key is shown with its SHA256
    fingerprint and pinned only with --accept-new; a changed key, or an announcement using a
    known host's name with another key, is always refused (exit 3). Afterwards `fleet status`
    includes the host.

    \b
    Examples:
      fleet adopt gpu7                       show the fingerprint that would be pinned
      fleet adopt gpu7 --accept-new
      fleet adopt 10.0.0.7:2222 --accept-new --name gpu7 --inventory-append
    """
    from fleet.service import open as open_fleet

    options = global_options(ctx)

    async def run() -> AdoptResult:
        async with open_fleet(options.db_url, options.inventory_path) as service:
            return await service.adopt(target, accept_new=accept_new,
                                       inventory_append=inventory_append, name=name, user=user)

    result = run_async(run)
    if options.as_json:
        echo_json(result.as_dict())
    else:
        click.echo(_adopt_line(result))
    return 0


@click.command()
@click.option("--session", metavar="NAME", help="Session name to announce (HW-SD sessions).")
@click.option("--interface", "interfaces", multiple=True, metavar="ADDR|NAME",
              help="Interface to announce on: an IP address or a name (repeatable) "
                   "[default: every interface, announcing its non-loopback addresses].")
@click.option("--hwsd", is_flag=True, help="Also publish HW-SD's _gpu-sd._tcp record.")
@click.option("--ssh-port", default=22, show_default=True, type=click.IntRange(1, 65535),
              help="The SSH port controllers should use.")
@click.option("--name", metavar="NAME", help="Instance name [default: this host's name].")
@click.option("--interval", default="60s", show_default=True, metavar="DURATION",
              help="How often to re-probe the GPUs and update the record if they changed.")
@click.option("--duration", metavar="DURATION",
              help="Stop (with goodbye packets) after this long [default: until SIGINT/TERM].")
@json_option
@click.pass_context
def announce(ctx: click.Context, session: str | None, interfaces: tuple[str, ...], hwsd: bool,
             ssh_port: int, name: str | None, interval: str, duration: str | None) -> int:
    """Publish this host's GPU summary over mDNS (_fleet._tcp) until stopped.

    Meant for a host that wants controllers to find it, e.g. as a systemd user unit. The TXT
    record holds v, session, ssh_port, gpus, gpu_model and mem_gb from the same probe fleet
    uses; it is updated when the GPUs change, and withdrawn (goodbye) on SIGINT/SIGTERM.
    Announcing gives no access: a controller still has to adopt the host and its key.

    \b
    Examples:
      fleet announce --session lab-a
      fleet announce --interface eth1 --hwsd --ssh-port 2222
    """
    import asyncio
    import socket

    from fleet.discovery.announce import AnnounceConfig, run_announcer
    from fleet.discovery.browse import select_interfaces
    from fleet.timeparse import parse_duration

    options = global_options(ctx)
    config = AnnounceConfig(
        interfaces=select_interfaces(list(interfaces)), hostname=socket.gethostname(),
        ssh_port=ssh_port, session=session, hwsd=hwsd, instance=name,
        reprobe_interval_s=parse_duration(interval, what="--interval"))
    stop_after = parse_duration(duration, what="--duration") if duration else None

    def published(txts: dict[str, dict[str, str]]) -> None:
        if options.as_json:
            echo_json({"instance": config.instance_name, "services": txts})
        else:
            for kind, txt in txts.items():
                pairs = " ".join(f"{key}={value}" for key, value in txt.items())
                click.echo(f"announcing {config.instance_name}.{kind} on "
                           f"{config.interfaces.describe()}: {pairs}")

    async def run() -> int:
        async with stop_on_signals() as stop:
            if stop_after is not None:
                asyncio.get_running_loop().call_later(stop_after, stop.set)
            return await run_announcer(config, stop, on_publish=published)

    run_async(run)
    click.echo("withdrawn", err=True)
    return 0
