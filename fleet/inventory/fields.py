"""Checked host settings (address, port, user, …) and labels read from YAML nodes."""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml

from fleet.inventory.yamlnodes import BOOL_TAG, YamlFile, is_null, kind
from fleet.ssh.jump_spec import BadJump, parse_jump

# The per-host settings an inventory may give, in HostSpec's field names.
HOST_FIELDS = ("address", "port", "user", "identity_file", "python", "connection", "proxy_jump")
# Settings that may be inherited from groups; an address belongs to one host only.
VAR_FIELDS = tuple(field for field in HOST_FIELDS if field != "address")
CONNECTIONS = ("ssh", "local")


@dataclass(frozen=True)
class Setting:
    """One value as written in the inventory, with the line it was written on."""

    value: str | int
    line: int


def port_value(source: YamlFile, node: yaml.Node, what: str, *, allow_text: bool = False) -> int:
    """A TCP port 1..65535; digit strings are accepted only when `allow_text` (Ansible does)."""
    value = source.scalar(node, what)
    if allow_text and isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value) if isinstance(value, str) else kind(node)
        raise source.error(node, f"{what} must be an integer port number, not {shown}")
    return check_port(source, node, value, what)


def check_port(source: YamlFile, node: yaml.Node, value: int, what: str) -> int:
    """`value` if it is a valid TCP port (1..65535)."""
    if not 1 <= value <= 65535:
        raise source.error(node, f"{what} {value} is out of range (1-65535)")
    return value


def connection_value(source: YamlFile, node: yaml.Node, what: str) -> str:
    """`ssh` or `local`."""
    value = source.text(node, what)
    if value not in CONNECTIONS:
        raise source.error(node, f"{what} must be 'ssh' or 'local', not {value!r}")
    return value


def address_value(source: YamlFile, node: yaml.Node, what: str) -> str:
    """A host name or IP address: one word."""
    value = source.text(node, what).strip()
    if any(char.isspace() for char in value):
        raise source.error(node, f"{what} {value!r} must not contain spaces")
    return value


def field_value(source: YamlFile, name: str, node: yaml.Node) -> Setting:
    """The checked value of host setting `name` (one of HOST_FIELDS)."""
    line = node.start_mark.line + 1
    if name == "port":
        return Setting(port_value(source, node, "port"), line)
    if name == "connection":
        return Setting(connection_value(source, node, "connection"), line)
    if name == "address":
        return Setting(address_value(source, node, name), line)
    if name == "proxy_jump":
        return Setting(jump_value(source, node), line)
    if name == "identity_file":
        return Setting(identity_value(source, node), line)
    return Setting(source.text(node, name).strip(), line)


def jump_value(source: YamlFile, node: yaml.Node, value: str | None = None,
               what: str = "proxy_jump") -> str:
    """A ProxyJump value `[user@]host[:port],...` (the node's, or `value` found in it) whose
    hops fleet can dial."""
    if value is None:
        value = address_value(source, node, what)
    try:
        parse_jump(value)
    except BadJump as exc:
        raise source.error(node, f"{what}: {exc}") from None
    return value


def identity_value(source: YamlFile, node: yaml.Node, what: str = "identity_file") -> str:
    """A private key file's path; one that names a directory is a mistake here, not a host's
    failure later (a missing file may yet be created: connecting says so)."""
    value = source.text(node, what).strip()
    if os.path.isdir(os.path.expanduser(value)):
        raise source.error(node, f"{what} {value!r} is a directory, not a key file")
    return value


def label_text(source: YamlFile, node: yaml.Node, what: str) -> str:
    """A label value as text: scalars as written, booleans as `true`/`false`."""
    if is_null(node):
        raise source.error(node, f"{what} has no value (labels are key=value)")
    if not isinstance(node, yaml.ScalarNode):
        raise source.error(node, f"{what} must be a single value, not {kind(node)}")
    if node.tag == BOOL_TAG:
        return "true" if source.scalar(node, what) else "false"
    return str(node.value)


def check_label_key(source: YamlFile, node: yaml.Node, key: str) -> str:
    """A label name: non-empty, no spaces, no `=`."""
    if not key or "=" in key or any(char.isspace() for char in key):
        raise source.error(node, f"label name {key!r} must be one word without '='")
    return key


def labels_value(source: YamlFile, node: yaml.Node) -> dict[str, Setting]:
    """`labels:` as a mapping of scalars, or a list of `key=value` strings."""
    labels: dict[str, Setting] = {}
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            text = source.text(item, "a label")
            key, sep, value = text.partition("=")
            if not sep:
                raise source.error(item, f"label {text!r} must be written key=value")
            key = check_label_key(source, item, key.strip())
            labels[key] = Setting(value.strip(), item.start_mark.line + 1)
        return labels
    if not isinstance(node, yaml.MappingNode) and not is_null(node):
        raise source.error(node, f"labels must be a mapping of key: value, not {kind(node)}")
    for entry in source.mapping(node, "labels"):
        key = check_label_key(source, entry.key_node, entry.key)
        labels[key] = Setting(label_text(source, entry.value, f"label {key!r}"), entry.line)
    return labels


def check_name(source: YamlFile, node: yaml.Node, name: str, what: str) -> str:
    """A host or group name: one word, no commas, not starting with `@` or `!` (selectors)."""
    if not name or any(char.isspace() for char in name) or "," in name or name[0] in "@!":
        raise source.error(
            node, f"{what} name {name!r} must be one word without commas, not starting with @ or !"
        )
    return name
