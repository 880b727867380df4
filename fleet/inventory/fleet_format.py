"""fleet's own inventory format (see inventory.example.yaml) read into an InventoryDraft."""

from __future__ import annotations

import yaml

from fleet.errors import ConfigError
from fleet.inventory.drafts import InventoryDraft
from fleet.inventory.fields import (
    HOST_FIELDS,
    VAR_FIELDS,
    Setting,
    check_name,
    check_port,
    field_value,
    labels_value,
)
from fleet.inventory.ranges import expand_host_range, has_host_range
from fleet.inventory.yamlnodes import Entry, YamlFile, is_null, line_of

TOP_KEYS = ("version", "vars", "labels", "hosts", "groups", "settings")
GROUP_KEYS = ("vars", "labels", "hosts", "children")
HOST_KEYS = (*HOST_FIELDS, "labels")
SUPPORTED_VERSION = 1


def read_fleet_inventory(source: YamlFile, root: yaml.Node) -> InventoryDraft:
    """Parse a fleet-format document whose top level is `root`."""
    draft = InventoryDraft(path=source.path, strict=True)
    entries = source.mapping(root, "the inventory's top level")
    source.check_keys(entries, TOP_KEYS, "the inventory's top level")
    by_key = {entry.key: entry for entry in entries}
    if "version" in by_key:
        _check_version(source, by_key["version"].value)
    if "vars" in by_key:
        draft.root.vars = _vars(source, by_key["vars"].value, "top-level vars")
    if "labels" in by_key:
        draft.root.labels = labels_value(source, by_key["labels"].value)
    if "hosts" in by_key:
        _hosts(source, draft, by_key["hosts"].value, None)
    if "groups" in by_key:
        for entry in source.mapping(by_key["groups"].value, "groups"):
            _group(source, draft, entry)
    if "settings" in by_key:
        settings = source.to_python(by_key["settings"].value, "settings")
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise source.error(by_key["settings"].value, "settings must be a mapping")
        draft.settings = settings
        draft.settings_line = by_key["settings"].line
    return draft


def _check_version(source: YamlFile, node: yaml.Node) -> None:
    """Only version 1 exists."""
    version = source.scalar(node, "version")
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise source.error(
            node, f"unsupported inventory version {version!r} (this fleet reads version 1)"
        )


def _vars(source: YamlFile, node: yaml.Node, what: str) -> dict[str, Setting]:
    """An inheritable `vars:` mapping: every host setting except address."""
    entries = source.mapping(node, what)
    for entry in entries:
        if entry.key == "address":
            raise source.error(
                entry.key_node, f"address cannot be set in {what}: each host has its own"
            )
    source.check_keys(entries, VAR_FIELDS, what)
    return {entry.key: field_value(source, entry.key, entry.value) for entry in entries}


def _group(source: YamlFile, draft: InventoryDraft, entry: Entry) -> None:
    """One group body: vars, labels, hosts, children (list of names or inline groups)."""
    name = check_name(source, entry.key_node, entry.key, "group")
    group = draft.group(name, entry.line)
    what = f"group {name!r}"
    entries = source.mapping(entry.value, what)
    source.check_keys(entries, GROUP_KEYS, what)
    for item in entries:
        if item.key == "vars":
            group.vars.update(_vars(source, item.value, f"vars of {what}"))
        elif item.key == "labels":
            group.labels.update(labels_value(source, item.value))
        elif item.key == "hosts":
            _hosts(source, draft, item.value, name)
        else:
            _children(source, draft, group.children, item.value, what)


def _children(
    source: YamlFile, draft: InventoryDraft, children: dict[str, int], node: yaml.Node, what: str
) -> None:
    """`children:` as a list of group names, or a mapping of inline group definitions."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            child = check_name(source, item, source.text(item, "a child group"), "group")
            children.setdefault(child, line_of(item))
        return
    for entry in source.mapping(node, f"children of {what}"):
        _group(source, draft, entry)
        children.setdefault(entry.key, entry.line)


def _hosts(source: YamlFile, draft: InventoryDraft, node: yaml.Node, group: str | None) -> None:
    """`hosts:` as a mapping of name (or range) to settings, or a plain list of names."""
    if group is not None:
        draft.group(group, line_of(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            name = source.text(item, "a host name")
            _add_hosts(source, draft, item, name, None, group)
        return
    for entry in source.mapping(node, "hosts"):
        _add_hosts(source, draft, entry.key_node, entry.key, entry.value, group)


def _add_hosts(
    source: YamlFile,
    draft: InventoryDraft,
    name_node: yaml.Node,
    pattern: str,
    body: yaml.Node | None,
    group: str | None,
) -> None:
    """Add the host(s) one entry names; a range gives every host the same settings.

    In a range entry, `address` and `port` may be ranges of the same length, which pair up
    with the names in order (`gpu[1:3]: {address: "10.0.0.[11:13]"}`).
    """
    try:
        names = expand_host_range(pattern)
    except ConfigError as exc:
        raise source.error(name_node, str(exc)) from exc
    for name in names:
        check_name(source, name_node, name, "host")
    fields: dict[str, Setting] = {}
    labels: dict[str, Setting] = {}
    paired: dict[str, list[Setting]] = {}
    entries = [] if body is None else source.mapping(body, f"host {pattern!r}")
    source.check_keys(entries, HOST_KEYS, f"host {pattern!r}")
    for entry in entries:
        if entry.key == "labels":
            labels = labels_value(source, entry.value)
        elif entry.key in ("address", "port") and _is_range(entry.value):
            if len(names) == 1:  # it would be taken as one literal address
                raise source.error(entry.value, f"host {pattern!r}: a range in {entry.key} "
                                   "pairs with a range of host names (gpu[1:3]: {address: "
                                   '"10.0.0.[11:13]"}); one host has one ' + entry.key)
            paired[entry.key] = _paired_values(source, entry, len(names))
        else:
            fields[entry.key] = field_value(source, entry.key, entry.value)
    for index, name in enumerate(names):
        own = dict(fields)
        own.update({key: values[index] for key, values in paired.items()})
        draft.add_host(name, line_of(name_node), own, labels, group)


def _is_range(node: yaml.Node) -> bool:
    """Whether a value is a string containing a host range."""
    return (
        isinstance(node, yaml.ScalarNode) and not is_null(node) and has_host_range(str(node.value))
    )


def _paired_values(source: YamlFile, entry: Entry, count: int) -> list[Setting]:
    """A ranged address or port expanded to exactly `count` values."""
    text = str(entry.value.value)
    try:
        values = expand_host_range(text)
    except ConfigError as exc:
        raise source.error(entry.value, str(exc)) from exc
    if len(values) != count:
        raise source.error(
            entry.value,
            f"{entry.key} range {text!r} gives {len(values)} values for {count} hosts",
        )
    line = line_of(entry.value)
    if entry.key == "port":
        if not all(value.isdigit() for value in values):
            raise source.error(entry.value, f"port range {text!r} must give numbers")
        return [
            Setting(check_port(source, entry.value, int(value), "port"), line) for value in values
        ]
    return [Setting(value, line) for value in values]
