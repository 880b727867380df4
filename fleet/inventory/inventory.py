"""The Inventory value: the hosts, groups and raw settings one inventory file yields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleet.model import HostSpec


@dataclass(frozen=True)
class Inventory:
    """Hosts in file order, each group's member host names, and the file's `settings` mapping.

    `path` is None when no inventory file exists (then `hosts` is the local machine only).
    `settings` is kept raw for the monitor's configuration to validate; `settings_line` is the
    line of the `settings:` key, for its error messages.
    """

    hosts: tuple[HostSpec, ...]
    path: Path | None
    groups: dict[str, tuple[str, ...]]
    settings: dict[str, object]
    settings_line: int | None

    def host(self, name: str) -> HostSpec | None:
        """The host called `name`, or None."""
        for spec in self.hosts:
            if spec.name == name:
                return spec
        return None
