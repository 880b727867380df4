"""Inventory: fleet YAML, Ansible YAML and ~/.ssh/config turned into host specs.

load_inventory(path=None, *, ssh_config=None, fmt="auto", ssh_config_hosts=False)
select_hosts(inv, "gpu*,@lab,label:rack=a,!gpu03"), host_matches(pattern, name, groups, labels)
default_inventory_path(), default_ssh_config_path()
expand_host_range("gpu[01:16]")
resolve_ssh_config(spec, path, explicit=None), load_ssh_config_hosts(path)
"""

from fleet.inventory.inventory import Inventory
from fleet.inventory.loader import default_inventory_path, detect_format, load_inventory, local_host
from fleet.inventory.ranges import expand_host_range
from fleet.inventory.select import host_matches, select_hosts
from fleet.inventory.sshconfig import (
    default_ssh_config_path,
    load_ssh_config_hosts,
    merge_ssh_config_hosts,
    resolve_ssh_config,
)

__all__ = [
    "Inventory",
    "default_inventory_path",
    "default_ssh_config_path",
    "detect_format",
    "expand_host_range",
    "host_matches",
    "load_inventory",
    "load_ssh_config_hosts",
    "local_host",
    "merge_ssh_config_hosts",
    "resolve_ssh_config",
    "select_hosts",
]
