"""Find, detect, read and resolve an inventory file into an Inventory."""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from fleet.errors import ConfigError
from fleet.inventory.ansible import looks_like_ansible, read_ansible_inventory
from fleet.inventory.build import BuiltHost, build_hosts, check_unique
from fleet.inventory.fleet_format import TOP_KEYS, read_fleet_inventory
from fleet.inventory.inventory import Inventory
from fleet.inventory.sshconfig import (
    load_ssh_config_hosts,
    merge_ssh_config_hosts,
    resolve_ssh_config,
)
from fleet.inventory.yamlnodes import YamlFile, read_yaml_file
from fleet.model import HostSpec

FORMATS = ("auto", "fleet", "ansible")
INVENTORY_FILENAME = "inventory.yaml"
# Keys only fleet's format has at the top level; one of them settles the format.
FLEET_ONLY_KEYS = frozenset({"version", "groups", "settings"})
LOCAL_ONLY_SOURCE = "(built-in: no inventory file, local machine only)"


def local_host() -> HostSpec:
    """The controller's own machine, reached without SSH."""
    return HostSpec(
        name="localhost", address="127.0.0.1", connection="local", source=LOCAL_ONLY_SOURCE
    )


def default_inventory_path() -> Path | None:
    """`./inventory.yaml`, else `$XDG_CONFIG_HOME/fleet/inventory.yaml` (default
    `~/.config/fleet/inventory.yaml`), whichever exists first; None when neither does.
    ConfigError when the first that exists is not a file (a directory of that name is a
    mistake to say, not a reason to fall back to the next place or the local machine)."""
    config_home = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if os.path.isabs(config_home) else Path("~", ".config").expanduser()
    for candidate in (Path.cwd() / INVENTORY_FILENAME, base / "fleet" / INVENTORY_FILENAME):
        if candidate.is_file():
            return candidate
        if candidate.exists():
            raise ConfigError("not an inventory file (a directory or special file)",
                              path=str(candidate))
    return None


def detect_format(source: YamlFile, root: yaml.Node) -> str:
    """`fleet` or `ansible`, from the top-level keys.

    fleet when every top-level key is one of fleet's (version, vars, labels, hosts, groups,
    settings) or any is version/groups/settings; else ansible when there is an `all` key or
    every top-level value is a group body (only hosts/children/vars keys); else fleet, so the
    error names the unexpected key.
    """
    if not isinstance(root, yaml.MappingNode):
        raise source.top_level_error(root, "the inventory's top level")
    keys = {str(key.value) for key, _ in root.value if isinstance(key, yaml.ScalarNode)}
    if keys <= set(TOP_KEYS) or keys & FLEET_ONLY_KEYS:
        return "fleet"
    return "ansible" if looks_like_ansible(source, root) else "fleet"


def load_inventory(
    path: Path | None = None,
    *,
    ssh_config: Path | None = None,
    fmt: str = "auto",
    ssh_config_hosts: bool = False,
) -> Inventory:
    """Read an inventory file (fleet or Ansible YAML) into an Inventory.

    `path` None means default_inventory_path(); with no file at all the inventory is the local
    machine only. `ssh_config` (e.g. `~/.ssh/config`, see default_ssh_config_path()) resolves
    every SSH host's HostName/Port/User/IdentityFile/ProxyJump, inventory values winning; with
    `ssh_config_hosts` its non-wildcard `Host` aliases are added too, unless the inventory
    already has their (address, port) or name. `fmt` is "auto", "fleet" or "ansible".
    Raises ConfigError naming the file and line for any problem.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown inventory format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if path is None:
        path = default_inventory_path()
    if path is None:
        built = [BuiltHost(local_host(), frozenset({"address", "connection"}))]
        inventory = Inventory(tuple(b.spec for b in built), None, {}, {}, None)
    else:
        inventory, built = _read_file(path, fmt)
    if ssh_config is None:
        return inventory
    resolved = [
        BuiltHost(resolve_ssh_config(item.spec, ssh_config, explicit=item.explicit), item.explicit)
        for item in built
    ]
    check_unique(resolved, ssh_config=str(ssh_config))
    hosts = tuple(item.spec for item in resolved)
    if ssh_config_hosts:
        hosts = merge_ssh_config_hosts(hosts, load_ssh_config_hosts(ssh_config))
    return dataclasses.replace(inventory, hosts=hosts)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, restoring its previous state on exit.

    Reading a large inventory allocates hundreds of thousands of long-lived nodes and values,
    none of them garbage; the collector's repeated full passes over them took more than half
    the load time of a 20,000-host file.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_file(path: Path, fmt: str) -> tuple[Inventory, list[BuiltHost]]:
    """Parse one inventory file in the given (or detected) format."""
    with _gc_paused():
        try:
            return _parse_file(path, fmt)
        except RecursionError as exc:
            # Composing and walking nested values recurses; libyaml alone allows 1,000 levels.
            raise ConfigError(
                "values are nested too deeply to read (hundreds of levels)", path=str(path)
            ) from exc


def _parse_file(path: Path, fmt: str) -> tuple[Inventory, list[BuiltHost]]:
    """_read_file's work: compose, detect, read the format, build the hosts."""
    source, root = read_yaml_file(path, str(path))
    chosen = detect_format(source, root) if fmt == "auto" else fmt
    if not isinstance(root, yaml.MappingNode):
        raise source.top_level_error(root, "the inventory's top level")
    draft = (
        read_ansible_inventory(source, root, vars_dir=path.parent)
        if chosen == "ansible"
        else read_fleet_inventory(source, root)
    )
    built, groups, implicit = build_hosts(draft)
    inventory = Inventory(
        hosts=tuple(item.spec for item in built),
        path=path,
        groups=groups,
        settings=draft.settings,
        settings_line=draft.settings_line,
        implicit_groups=implicit,
    )
    return inventory, built
