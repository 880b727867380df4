"""The Inventory value: the hosts, groups and raw settings one inventory file yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleet.model import HostSpec


@dataclass(frozen=True)
class Inventory:
    """Hosts in file order, each group's member host names, and the file's `settings` mapping.

    `path` is None when no inventory file exists (then `hosts` is the local machine only).
    `settings` is kept raw for the monitor's configuration to validate; `settings_line` is the
    line of the `settings:` key, for its error messages. `implicit_groups` are groups the
    format defines by itself and that are selectable (`--hosts ungrouped`) but not listed among
    `groups` nor in each host's groups: Ansible's `ungrouped`.
    """

    hosts: tuple[HostSpec, ...]
    path: Path | None
    groups: dict[str, tuple[str, ...]]
    settings: dict[str, object]
    settings_line: int | None
    implicit_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def host(self, name: str) -> HostSpec | None:
        """The host called `name`, or None."""
        for spec in self.hosts:
            if spec.name == name:
                return spec
        return None
