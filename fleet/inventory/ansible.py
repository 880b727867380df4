"""Ansible YAML inventories (`all`/`hosts`/`children`/`vars`, `ansible_*` vars) read as-is."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

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
from fleet.inventory.yamlnodes import (
    MAX_INVENTORY_BYTES,
    Entry,
    YamlFile,
    is_null,
    kind,
    line_of,
    read_text_file,
)

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
# What Ansible's host_group_vars plugin tries after `host_vars/NAME` / `group_vars/NAME`, in
# order (the first that exists is used); a directory of that name is read file by file.
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")
_HOST_PORT = re.compile(r"^(.+):([0-9]+)$")
_BRACKETED = re.compile(r"\[[^\]]*\]")


def looks_like_ansible(source: YamlFile, root: yaml.Node) -> bool:
    """Whether a top level reads as Ansible groups: `all`, or only group bodies (mappings
    with a `hosts`, `children` or `vars` key: a misspelt key beside them is then reported as
    the group's, not the whole group as an unknown fleet key) and empty groups (`spare:`)."""
    if not isinstance(root, yaml.MappingNode):
        return False
    entries = source.mapping(root, "the inventory's top level")
    if any(entry.key == "all" for entry in entries):
        return True
    return (
        bool(entries)
        and all(is_null(entry.value) or _is_group_body(entry.value) for entry in entries)
        # An empty group (`spare:`) is one in Ansible, but a file of nothing else reads as
        # misspelt fleet keys more likely than as an inventory of no hosts.
        and any(_is_group_body(entry.value) for entry in entries)
    )


def _is_group_body(node: yaml.Node) -> bool:
    """A mapping with at least one Ansible group key."""
    if not isinstance(node, yaml.MappingNode):
        return False
    return any(
        isinstance(key, yaml.ScalarNode) and key.value in GROUP_KEYS for key, _ in node.value
    )


def read_ansible_inventory(
    source: YamlFile, root: yaml.Node, *, vars_dir: Path | None = None
) -> InventoryDraft:
    """Parse an Ansible YAML inventory; top-level groups other than `all` are children of it.

    With `vars_dir` (the inventory file's directory), its `group_vars/` and `host_vars/` files
    apply as Ansible applies them: see _apply_vars_files.
    """
    draft = InventoryDraft(path=source.path, strict=False, hidden_groups=IMPLICIT_GROUPS,
                           implicit_ungrouped=True)
    all_group = draft.group("all", line_of(root))
    for entry in source.mapping(root, "the inventory's top level"):
        _group(source, draft, entry)
        if entry.key != "all":
            all_group.children.setdefault(entry.key, entry.line)
    if vars_dir is not None:
        _apply_vars_files(draft, vars_dir)
    return draft


def _apply_vars_files(draft: InventoryDraft, base: Path) -> None:
    """Layer `base/group_vars/GROUP` and `base/host_vars/HOST` over the inventory's own vars.

    As Ansible's host_group_vars plugin: `NAME`, `NAME.yml`, `NAME.yaml` or `NAME.json`
    (the first that exists), or a directory `NAME/` whose files are read in sorted order, later
    ones winning. A group's file overrides the group's vars in the inventory and a host's file
    the host's; groups still apply from shallow to deep, then the host. All the files together
    may hold at most MAX_INVENTORY_BYTES bytes.
    """
    budget = [MAX_INVENTORY_BYTES]
    group_dir = base / "group_vars"
    listing = _listing(group_dir)
    if listing:
        names = list(draft.groups)
        if "ungrouped" not in draft.groups:
            names.append("ungrouped")
        for name in names:
            files = _vars_files(group_dir, name, listing)
            if not files:
                continue
            fields, labels = _read_vars_files(files, budget)
            if name not in draft.groups:
                draft.groups["all"].children.setdefault(name, 0)
            group = draft.group(name, 0)
            group.vars.update(fields)
            group.labels.update(labels)
    host_dir = base / "host_vars"
    listing = _listing(host_dir)
    if listing:
        for host in draft.hosts.values():
            files = _vars_files(host_dir, host.name, listing)
            if files:
                fields, labels = _read_vars_files(files, budget)
                host.fields.update(fields)
                host.labels.update(labels)


def _listing(directory: Path) -> frozenset[str]:
    """The names in `directory`; empty when it is not a directory."""
    if not directory.is_dir():
        return frozenset()
    try:
        return frozenset(os.listdir(directory))
    except OSError as exc:
        raise ConfigError(f"cannot read Ansible vars directory: {exc.strerror}",
                          path=str(directory)) from exc


def _vars_files(directory: Path, name: str, listing: frozenset[str]) -> list[Path]:
    """The vars files Ansible reads for `name` in `directory`, in the order it applies them."""
    for extension in VARS_EXTENSIONS:
        if name + extension in listing:
            path = directory / (name + extension)
            return _vars_dir_files(path, set()) if path.is_dir() else [path]
    return []


def _vars_dir_files(directory: Path, seen: set[str]) -> list[Path]:
    """A vars directory's files, sorted, recursing into subdirectories without an extension;
    hidden names, backups (`~`) and other extensions are skipped, as Ansible does."""
    real = os.path.realpath(directory)
    if real in seen:  # a symlink loop
        return []
    seen.add(real)
    found: list[Path] = []
    for name in sorted(_listing(directory)):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = directory / name
        extension = os.path.splitext(name)[1]
        if path.is_dir():
            if not extension:
                found.extend(_vars_dir_files(path, seen))
        elif path.is_file() and extension in VARS_EXTENSIONS:
            found.append(path)
    return found


def _read_vars_files(
    paths: list[Path], budget: list[int]
) -> tuple[dict[str, Setting], dict[str, Setting]]:
    """The settings and labels of vars files applied in order; errors name the file and line."""
    fields: dict[str, Setting] = {}
    labels: dict[str, Setting] = {}
    for path in paths:
        display = str(path)
        try:
            size = path.stat().st_size
        except OSError:
            size = 0  # read_text_file names the problem
        if size <= budget[0]:
            text = read_text_file(path, display, "Ansible vars")
            size = len(text.encode("utf-8"))
        if size > budget[0]:
            raise ConfigError(
                f"Ansible vars files together exceed fleet's limit of {MAX_INVENTORY_BYTES:,} "
                f"bytes ({MAX_INVENTORY_BYTES // 2**20} MiB)",
                path=display,
            )
        budget[0] -= size
        source = YamlFile(display)
        root = source.compose_optional(text)
        if root is None:
            continue
        entries = source.mapping(root, "an Ansible vars file's top level")
        more_fields, more_labels = _translate_vars(source, entries)
        fields.update(more_fields)
        labels.update(more_labels)
    return fields, labels


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
