"""Apply group inheritance to an InventoryDraft and produce checked, unique HostSpecs."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.errors import ConfigError
from fleet.inventory.drafts import GroupDraft, HostDraft, InventoryDraft
from fleet.inventory.fields import Setting
from fleet.inventory.yamlnodes import closest
from fleet.model import HostSpec

# Group names with a meaning of their own in `--hosts` and the managed set: `all` is every
# host, `adopted` the hosts `fleet adopt` added. An inventory cannot define a group so named
# (Ansible's own implicit `all` and `ungrouped` aside).
RESERVED_GROUPS = ("all", "adopted")
# Ansible's implicit group of hosts that belong to no other group than `all`.
UNGROUPED = "ungrouped"


@dataclass(frozen=True)
class BuiltHost:
    """A host spec and the names of the HostSpec fields the inventory set (directly or by group)."""

    spec: HostSpec
    explicit: frozenset[str]


def group_depths(draft: InventoryDraft) -> dict[str, int]:
    """Each group's depth below the top (longest chain of parents); ConfigError on a cycle."""
    parents: dict[str, list[str]] = {name: [] for name in draft.groups}
    for group in draft.groups.values():
        for child, line in group.children.items():
            if child not in draft.groups:
                raise ConfigError(
                    f"group {group.name!r} lists unknown child group {child!r}"
                    f"{closest(child, draft.groups)}",
                    path=draft.path,
                    line=line,
                )
            parents[child].append(group.name)
    depths: dict[str, int] = {}

    def depth(name: str, chain: tuple[str, ...]) -> int:
        if name in chain:
            cycle = " -> ".join((*chain[chain.index(name) :], name))
            raise ConfigError(
                f"group cycle: {cycle}", path=draft.path, line=draft.groups[name].line
            )
        if name not in depths:
            depths[name] = 1 + max(
                (depth(parent, (*chain, name)) for parent in parents[name]), default=-1
            )
        return depths[name]

    for name in draft.groups:
        depth(name, ())
    return depths


def _parents(draft: InventoryDraft) -> dict[str, set[str]]:
    """Each group's direct parent groups."""
    parents: dict[str, set[str]] = {}
    for group in draft.groups.values():
        for child in group.children:
            parents.setdefault(child, set()).add(group.name)
    return parents


def _ancestors(parents: dict[str, set[str]], direct: list[str]) -> set[str]:
    """`direct` groups and every group above them."""
    found: set[str] = set()
    pending = list(direct)
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending.extend(parents.get(name, ()))
    return found


def _host_spec(draft: InventoryDraft, host: HostDraft, groups: list[GroupDraft]) -> BuiltHost:
    """Layer the root, then groups from shallow to deep, then the host's own settings."""
    values: dict[str, Setting] = dict(draft.root.vars)
    labels: dict[str, Setting] = dict(draft.root.labels)
    for group in groups:
        values.update(group.vars)
        labels.update(group.labels)
    values.update(host.fields)
    labels.update(host.labels)
    port = values.get("port")
    spec = HostSpec(
        name=host.name,
        address=str(values["address"].value) if "address" in values else host.name,
        port=int(port.value) if port is not None else 22,
        user=_text(values, "user"),
        identity_file=_text(values, "identity_file"),
        python=_text(values, "python") or "python3",
        connection="local" if _text(values, "connection") == "local" else "ssh",
        proxy_jump=_text(values, "proxy_jump"),
        groups=tuple(group.name for group in groups if group.name not in draft.hidden_groups),
        labels=tuple(sorted((key, str(setting.value)) for key, setting in labels.items())),
        source=f"{draft.path}:{host.line}",
    )
    return BuiltHost(spec, frozenset(values))


def _text(values: dict[str, Setting], name: str) -> str | None:
    """A string setting, or None when unset."""
    setting = values.get(name)
    return None if setting is None else str(setting.value)


def build_hosts(
    draft: InventoryDraft,
) -> tuple[list[BuiltHost], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Every host with inheritance applied, in file order, each group's member names, and
    the members of the format's implicit groups that are not reported (Ansible's `ungrouped`).

    ConfigError when two hosts share an (address, port), naming both lines, and for the
    names check_names refuses.
    """
    check_names(draft)
    depths = group_depths(draft)
    parents = _parents(draft)
    built: list[BuiltHost] = []
    members: dict[str, list[str]] = {
        name: [] for name in draft.groups if name not in draft.hidden_groups
    }
    implicit: dict[str, list[str]] = {UNGROUPED: []} if draft.implicit_ungrouped else {}
    for host in draft.hosts.values():
        found = _ancestors(parents, host.groups)
        if draft.implicit_ungrouped:
            # Ansible: a host is in `ungrouped` exactly when it is in no group but `all`.
            found.discard(UNGROUPED)
            if not found - {"all"}:
                found.add(UNGROUPED)
                implicit.setdefault(UNGROUPED, []).append(host.name)
        names = sorted(found, key=lambda name: (depths.get(name, 1), name))
        groups = [draft.groups.get(name) or GroupDraft(name, 0) for name in names]
        built.append(_host_spec(draft, host, groups))
        for name in names:
            if name in members:
                members[name].append(host.name)
    check_unique(built)
    return built, {name: tuple(hosts) for name, hosts in members.items()}, {
        name: tuple(hosts) for name, hosts in implicit.items()
    }


def check_names(draft: InventoryDraft) -> None:
    """ConfigError for a group with a reserved name, or a host named like a group: `--hosts
    NAME` must not pick a group's members and a host at once."""
    for group in draft.groups.values():
        if group.name in RESERVED_GROUPS and group.name not in draft.hidden_groups:
            raise ConfigError(
                f"group name {group.name!r} is reserved (`all` is every host, `adopted` the "
                "hosts `fleet adopt` added); rename the group",
                path=draft.path,
                line=group.line,
            )
    for host in draft.hosts.values():
        same = draft.groups.get(host.name)
        if same is not None or host.name in RESERVED_GROUPS:
            where = f" (defined at line {same.line})" if same is not None and same.line else ""
            kind = "a group's" if same is not None else "a reserved group's"
            raise ConfigError(
                f"host name {host.name!r} is also {kind} name{where}; `--hosts "
                f"{host.name}` could not tell them apart, so rename the host or the group",
                path=draft.path,
                line=host.line,
            )


def check_unique(built: list[BuiltHost], *, ssh_config: str | None = None) -> None:
    """ConfigError when two differently named hosts share an (address, port); `ssh_config`
    names the ssh config the addresses and ports were resolved through, for the message."""
    seen: dict[tuple[str, int], HostSpec] = {}
    for item in built:
        spec = item.spec
        other = seen.setdefault(spec.key, spec)
        if other is not spec:
            raise duplicate_error(other, spec, ssh_config=ssh_config)


def duplicate_error(
    first: HostSpec, second: HostSpec, *, ssh_config: str | None = None
) -> ConfigError:
    """The error for two hosts with one identity; names where each was defined (and the ssh
    config that gave them that identity, when one did)."""
    path, _, line = second.source.rpartition(":")
    how = "has" if ssh_config is None else f"resolves through ssh config {ssh_config} (its " \
        "HostName/Port) to"
    fix = "" if ssh_config is None else " in the inventory or the ssh config"
    return ConfigError(
        f"host {second.name!r} {how} the same address and port ({second.address}:{second.port}) "
        f"as host {first.name!r} defined at {first.source}; a host is identified by "
        f"(address, port), so give one of them a different address or port{fix}",
        path=path or second.source,
        line=int(line) if line.isdigit() else None,
    )
