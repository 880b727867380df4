"""Hosts and groups as a file declares them, before inheritance; merges repeated host entries."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.errors import ConfigError
from fleet.inventory.fields import Setting

# Host settings whose disagreement between two entries of one host is always an error.
IDENTITY_FIELDS = ("address", "port")
# The most hosts one inventory may define (ranges included), so that a few lines of ranges
# cannot expand into millions of hosts.
MAX_HOSTS = 100_000


@dataclass
class HostDraft:
    """One host's own settings and direct groups, gathered from every entry naming it."""

    name: str
    line: int
    fields: dict[str, Setting] = field(default_factory=dict)
    labels: dict[str, Setting] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


@dataclass
class GroupDraft:
    """One group's inheritable settings, labels, direct hosts and child groups."""

    name: str
    line: int
    vars: dict[str, Setting] = field(default_factory=dict)
    labels: dict[str, Setting] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: dict[str, int] = field(default_factory=dict)  # child name -> line naming it


@dataclass
class InventoryDraft:
    """Everything one inventory file declares.

    `strict` makes a host's conflicting settings in two entries an error (fleet's format);
    otherwise the later entry wins except for address and port (Ansible's rule). Groups in
    `hidden_groups` (Ansible's `all`, `ungrouped`) exist for inheritance and host patterns but
    are not reported; `implicit_ungrouped` gives Ansible's `ungrouped` group its meaning (the
    hosts in no other group than `all`), whether or not the file declares it.
    """

    path: str
    strict: bool
    root: GroupDraft = field(default_factory=lambda: GroupDraft("", 0))
    hosts: dict[str, HostDraft] = field(default_factory=dict)
    groups: dict[str, GroupDraft] = field(default_factory=dict)
    hidden_groups: frozenset[str] = frozenset()
    implicit_ungrouped: bool = False
    settings: dict[str, object] = field(default_factory=dict)
    settings_line: int | None = None

    def add_host(
        self,
        name: str,
        line: int,
        fields: dict[str, Setting],
        labels: dict[str, Setting],
        group: str | None,
    ) -> None:
        """Record one entry for host `name`; a repeated name merges into the same host."""
        host = self.hosts.get(name)
        if host is None:
            if len(self.hosts) >= MAX_HOSTS:
                raise ConfigError(
                    f"the inventory defines more than {MAX_HOSTS:,} hosts (fleet's limit)",
                    path=self.path,
                    line=line,
                )
            host = self.hosts[name] = HostDraft(name, line)
        for key, setting in fields.items():
            self._merge_setting(host, key, setting, host.fields, "")
        for key, setting in labels.items():
            self._merge_setting(host, key, setting, host.labels, "label ")
        if group is not None and group not in host.groups:
            host.groups.append(group)

    def _merge_setting(
        self,
        host: HostDraft,
        key: str,
        setting: Setting,
        known: dict[str, Setting],
        what: str,
    ) -> None:
        """Add `setting` to a host, refusing a disagreement with an earlier entry when required."""
        earlier = known.get(key)
        must_agree = self.strict or (not what and key in IDENTITY_FIELDS)
        if must_agree and earlier is not None and earlier.value != setting.value:
            raise ConfigError(
                f"host {host.name!r} has {what}{key} {setting.value!r} here but "
                f"{earlier.value!r} at line {earlier.line}; one host cannot have two values",
                path=self.path,
                line=setting.line,
            )
        known[key] = setting

    def group(self, name: str, line: int) -> GroupDraft:
        """The group called `name`, created on first mention."""
        existing = self.groups.get(name)
        if existing is None:
            existing = self.groups[name] = GroupDraft(name, line)
        return existing
