"""Adding an adopted host to an inventory file as text, so the file's comments and layout stay.

The entry is inserted at the end of the block-style `hosts:` mapping (fleet format) or
`all: hosts:` mapping (Ansible format, recognised as the inventory loader recognises it), or a
new `hosts:` section (`all: hosts:` for an Ansible file without `all:`) is appended when the
file has none. The result is re-read with the real loader; if it does not load, the file is
restored. `check_append` does the same without writing, so a caller can refuse before acting.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fleet.errors import ConfigError


def _scalar(value: str) -> str:
    """A YAML scalar for `value` (JSON strings are valid YAML and quote everything needed)."""
    return json.dumps(value)


def _entry_lines(indent: str, name: str, address: str, port: int, user: str | None,
                 ansible: bool) -> list[str]:
    inner = indent + "  "
    keys = ("ansible_host", "ansible_port", "ansible_user") if ansible else \
        ("address", "port", "user")
    lines = [f"{indent}{_scalar(name)}:  # adopted by `fleet adopt`",
             f"{inner}{keys[0]}: {_scalar(address)}", f"{inner}{keys[1]}: {port}"]
    if user:
        lines.append(f"{inner}{keys[2]}: {_scalar(user)}")
    return lines


def _mapping_value(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found: yaml.Node = value_node
            return found
    return None


def append_host(path: Path, *, name: str, address: str, port: int, user: str | None) -> int:
    """Insert the host into the inventory at `path`; returns the 1-based line of its entry."""
    text, new_text, entry_line = _appended(path, name=name, address=address, port=port,
                                           user=user)
    _write_checked(path, text, new_text)
    return entry_line


def check_append(path: Path, *, name: str, address: str, port: int, user: str | None) -> None:
    """ConfigError when `append_host` would fail; the file is not changed."""
    _, new_text, _ = _appended(path, name=name, address=address, port=port, user=user)
    _load_checked(path, new_text)


def _appended(path: Path, *, name: str, address: str, port: int, user: str | None) -> \
        tuple[str, str, int]:
    """The file's text, the text with the host inserted, and the 1-based line of its entry."""
    from fleet.inventory.ansible import looks_like_ansible
    from fleet.inventory.yamlnodes import YamlFile

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read inventory: {exc.strerror or exc}", path=str(path)) \
            from exc
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse inventory: {exc}", path=str(path)) from exc
    lines = text.splitlines()
    ansible = root is not None and looks_like_ansible(YamlFile(str(path)), root)
    all_group = _mapping_value(root, "all") if ansible and root is not None else None
    parent = all_group if ansible else root
    hosts = _mapping_value(parent, "hosts") if parent is not None else None
    if hosts is None or (isinstance(hosts, yaml.ScalarNode) and hosts.value in ("", "~", "null")):
        if (ansible and all_group is not None) or (hosts is not None):
            raise ConfigError("the inventory has no block-style hosts mapping to add to; "
                              "add the host by hand", path=str(path))
        insert_at = len(lines)
        if ansible:  # Ansible groups only, no `all:`: the host goes under a new `all: hosts:`
            new_lines = ["", "all:", "  hosts:",
                         *_entry_lines("    ", name, address, port, user, True)]
            entry_line = insert_at + 4
        else:
            new_lines = ["", "hosts:", *_entry_lines("  ", name, address, port, user, False)]
            entry_line = insert_at + 3
    elif isinstance(hosts, yaml.MappingNode) and not hosts.flow_style and hosts.value:
        first_key = hosts.value[0][0]
        indent = " " * first_key.start_mark.column
        # A nested value's end_mark points at the start of the next token's line (only blanks
        # before it); a scalar's points inside its own line.
        end = hosts.value[-1][1].end_mark
        ends_line = end.line < len(lines) and not lines[end.line][: end.column].strip()
        insert_at = end.line if ends_line else end.line + 1
        while insert_at > 0 and insert_at <= len(lines) and not lines[insert_at - 1].strip():
            insert_at -= 1
        new_lines = _entry_lines(indent, name, address, port, user, ansible)
        entry_line = insert_at + 1
    else:
        raise ConfigError("the inventory's hosts are not a non-empty block mapping; add the "
                          "host by hand", path=str(path))
    updated = lines[:insert_at] + new_lines + lines[insert_at:]
    return text, "\n".join(updated) + "\n", entry_line


def _load_checked(path: Path, new_text: str) -> None:
    """Load `new_text` as the inventory at `path` would load (a sibling file, so relative
    paths resolve alike); ConfigError naming `path` when the loader rejects it."""
    import os
    import tempfile

    from fleet.inventory import load_inventory

    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".yaml",
                                        dir=path.parent)
    except OSError:  # a folder we may not write in: the append itself re-checks and restores
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(new_text)
        try:
            load_inventory(Path(name))
        except ConfigError as exc:
            message = str(exc).replace(name, str(path))
            raise ConfigError(f"adding the host would break the inventory ({message}); file "
                              f"left unchanged", path=str(path)) from exc
    finally:
        Path(name).unlink(missing_ok=True)


def _write_checked(path: Path, old_text: str, new_text: str) -> None:
    """Write `new_text`; restore `old_text` if the inventory loader rejects the result."""
    from fleet.inventory import load_inventory

    path.write_text(new_text, encoding="utf-8")
    try:
        load_inventory(path)
    except ConfigError as exc:
        path.write_text(old_text, encoding="utf-8")
        raise ConfigError(f"adding the host would break the inventory ({exc}); file left "
                          f"unchanged", path=str(path)) from exc
