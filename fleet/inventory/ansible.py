"""Ansible YAML inventories (`all`/`hosts`/`children`/`vars`, `ansible_*` vars) read as-is."""

from __future__ import annotations

import re
import shlex

import yaml

from fleet.errors import ConfigError
from fleet.inventory.drafts import GroupDraft, InventoryDraft
from fleet.inventory.fields import (
    Setting,
    address_value,
    check_label_key,
    check_name,
    identity_value,
    jump_value,
    label_text,
    port_value,
)
from fleet.inventory.ranges import expand_host_range
from fleet.inventory.yamlnodes import Entry, YamlFile, is_null, kind, line_of

GROUP_KEYS = ("hosts", "children", "vars")
# Groups every Ansible inventory has implicitly; used for inheritance and `--hosts`, not
# reported as groups (`ungrouped`'s members are computed: see build_hosts).
IMPLICIT_GROUPS = frozenset({"all", "ungrouped"})
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user")
KEY_FILE_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
SSH_ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
# ansible_connection values fleet can honour, and what they mean to fleet.
CONNECTIONS = {"local": "local", "ssh": "ssh", "smart": "ssh", "paramiko": "ssh"}
# ansible_python_interpreter values that ask Ansible to discover Python; fleet uses python3.
AUTO_PYTHON = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_HOST_PORT = re.compile(r"^(.+):([0-9]+)$")
_BRACKETED = re.compile(r"\[[^\]]*\]")


def looks_like_ansible(source: YamlFile, root: yaml.Node) -> bool:
    """Whether a top level reads as Ansible groups: `all`, or only group bodies (mappings
    with a `hosts`, `children` or `vars` key: a misspelt key beside them is then reported as
    the group's, not the whole group as an unknown fleet key)."""
    if not isinstance(root, yaml.MappingNode):
        return False
    entries = source.mapping(root, "the inventory's top level")
    if any(entry.key == "all" for entry in entries):
        return True
    return bool(entries) and all(_is_group_body(entry.value) for entry in entries)


def _is_group_body(node: yaml.Node) -> bool:
    """A mapping with at least one Ansible group key."""
    if not isinstance(node, yaml.MappingNode):
        return False
    return any(
        isinstance(key, yaml.ScalarNode) and key.value in GROUP_KEYS for key, _ in node.value
    )


def read_ansible_inventory(source: YamlFile, root: yaml.Node) -> InventoryDraft:
    """Parse an Ansible YAML inventory; top-level groups other than `all` are children of it."""
    draft = InventoryDraft(path=source.path, strict=False, hidden_groups=IMPLICIT_GROUPS,
                           implicit_ungrouped=True)
    all_group = draft.group("all", line_of(root))
    for entry in source.mapping(root, "the inventory's top level"):
        _group(source, draft, entry)
        if entry.key != "all":
            all_group.children.setdefault(entry.key, entry.line)
    return draft


def _group(source: YamlFile, draft: InventoryDraft, entry: Entry) -> GroupDraft:
    """One group body (possibly empty); a group named twice merges, as in Ansible."""
    name = check_name(source, entry.key_node, entry.key, "group")
    group = draft.group(name, entry.line)
    what = f"group {name!r}"
    items = source.mapping(entry.value, what)
    source.check_keys(items, GROUP_KEYS, what)
    for item in items:
        if item.key == "vars":
            fields, labels = _translate_vars(source, source.mapping(item.value, f"vars of {what}"))
            group.vars.update(fields)
            group.labels.update(labels)
        elif item.key == "hosts":
            for host in source.mapping(item.value, f"hosts of {what}"):
                _host(source, draft, host, name)
        else:
            for child in source.mapping(item.value, f"children of {what}"):
                _group(source, draft, child)
                group.children.setdefault(child.key, child.line)
    return group


def _host(source: YamlFile, draft: InventoryDraft, entry: Entry, group: str) -> None:
    """One `name: {vars}` host entry; `name` may be a range and may end in `:PORT`."""
    pattern, port = entry.key, None
    host_port = _HOST_PORT.match(pattern)
    # `name:PORT`, where `name` (ranges aside) has no colon of its own, unlike an IPv6 address.
    if host_port is not None and ":" not in _BRACKETED.sub("", host_port.group(1)):
        pattern, port = host_port.group(1), int(host_port.group(2))
    try:
        names = expand_host_range(pattern)
    except ConfigError as exc:
        raise source.error(entry.key_node, str(exc)) from exc
    fields, labels = _translate_vars(source, source.mapping(entry.value, f"host {entry.key!r}"))
    if port is not None and "port" not in fields:
        if not 1 <= port <= 65535:
            raise source.error(entry.key_node, f"port {port} is out of range (1-65535)")
        fields["port"] = Setting(port, entry.line)
    for name in names:
        check_name(source, entry.key_node, name, "host")
        draft.add_host(name, entry.line, fields, labels, group)


def _translate_vars(
    source: YamlFile, entries: list[Entry]
) -> tuple[dict[str, Setting], dict[str, Setting]]:
    """Ansible vars as fleet host settings and labels.

    The `ansible_*` connection vars become settings; other `ansible_*` vars are ignored; any
    other var with a plain scalar value (string, number, boolean) becomes a label, and
    lists, mappings, empty values and Jinja templates are skipped.
    """
    fields: dict[str, Setting] = {}
    labels: dict[str, Setting] = {}
    for entry in entries:
        key, node = entry.key, entry.value
        line = line_of(node)
        if key.startswith("ansible_"):
            if isinstance(node, yaml.ScalarNode) and "{{" in str(node.value):
                raise source.error(node, f"{key}: Jinja templates are not supported by fleet")
            setting = _connection_var(source, key, node)
            if setting is not None:
                fields[setting[0]] = Setting(setting[1], line)
        elif _is_label_value(node):
            label = check_label_key(source, entry.key_node, key)
            labels[label] = Setting(label_text(source, node, f"var {key!r}"), line)
    return fields, labels


def _is_label_value(node: yaml.Node) -> bool:
    """Whether a non-ansible var can be a label: a non-empty plain scalar, not a template."""
    return (
        isinstance(node, yaml.ScalarNode)
        and not is_null(node)
        and str(node.value) != ""
        and "{{" not in str(node.value)
    )


def _connection_var(source: YamlFile, key: str, node: yaml.Node) -> tuple[str, str | int] | None:
    """The (fleet field, value) an `ansible_*` var sets, or None for vars fleet ignores."""
    if key in ADDRESS_VARS:
        return "address", address_value(source, node, key)
    if key in PORT_VARS:
        return "port", port_value(source, node, key, allow_text=True)
    if key in USER_VARS:
        return "user", source.text(node, key).strip()
    if key in KEY_FILE_VARS:
        return "identity_file", identity_value(source, node, key)
    if key == "ansible_python_interpreter":
        python = source.text(node, key).strip()
        return None if python in AUTO_PYTHON else ("python", python)
    if key == "ansible_connection":
        value = source.text(node, key).strip()
        if value not in CONNECTIONS:
            raise source.error(
                node,
                f"ansible_connection {value!r} is not supported: fleet connects with ssh "
                "or local (ssh, smart, paramiko or local)",
            )
        return "connection", CONNECTIONS[value]
    if key in SSH_ARGS_VARS:
        jump = _proxy_jump(source, node, key)
        return None if jump is None else ("proxy_jump", jump_value(source, node, jump, key))
    return None


def _proxy_jump(source: YamlFile, node: yaml.Node, key: str) -> str | None:
    """The jump host in ssh arguments (`-J host` or `-o ProxyJump=host`), if any."""
    if not isinstance(node, yaml.ScalarNode):
        raise source.error(node, f"{key} must be a string, not {kind(node)}")
    try:
        words = shlex.split(str(node.value))
    except ValueError as exc:
        raise source.error(node, f"{key}: cannot split ssh arguments: {exc}") from exc
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else ""
        if word == "-J" and following:
            return following
        if word.startswith("-J") and len(word) > 2:
            return word[2:]
        option = following if word == "-o" else word[2:] if word.startswith("-o") else ""
        name, sep, value = option.partition("=")
        if sep and name.strip().lower() == "proxyjump" and value.strip():
            return value.strip()
    return None
