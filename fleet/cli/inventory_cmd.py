"""`fleet inventory check`: validate an inventory file and show the hosts it defines."""

from __future__ import annotations

from pathlib import Path

import click

from fleet.cli.context import echo_json, global_options, json_option


@click.group()
def inventory() -> None:
    """Inspect inventory files."""


@inventory.command("check")
@click.argument("path", required=False, type=click.Path(path_type=Path, dir_okay=False))
@json_option
@click.pass_context
def inventory_check(ctx: click.Context, path: Path | None) -> int:
    """Validate an inventory (fleet or Ansible YAML) and list its hosts.

    The `settings:` section is checked too, and ~/.ssh/config is applied as every other
    command applies it. Errors name the file and line and exit with code 2.

    \b
    Examples:
      fleet inventory check inventory.yaml
      fleet inventory check --json ~/ansible/hosts.yaml
    """
    from fleet.cli.hosts_cmd import host_rows, render_hosts
    from fleet.inventory import default_ssh_config_path, load_inventory
    from fleet.monitor.config import inventory_settings

    options = global_options(ctx)
    # exactly what every other command loads: ~/.ssh/config's HostName/Port/... applied
    loaded = load_inventory(path or options.inventory_path, ssh_config=default_ssh_config_path())
    inventory_settings(loaded)  # a bad value there would stop `fleet monitor` and `serve`
    source = str(loaded.path) if loaded.path else "(no inventory file: the local machine only)"
    if options.as_json:
        echo_json({"path": str(loaded.path) if loaded.path else None,
                   "hosts": host_rows(loaded.hosts),
                   "groups": {name: list(members) for name, members in loaded.groups.items()}})
    else:
        click.echo(render_hosts(loaded.hosts))
        click.echo(f"{source}: OK, {len(loaded.hosts)} hosts, {len(loaded.groups)} groups")
    return 0
