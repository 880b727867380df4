"""Inventory names: hosts named like groups, reserved group names, Ansible's `ungrouped`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import load_inventory, select_hosts


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def test_host_named_like_a_group_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts:\n  a100: {address: 10.0.0.2}\n  alpha: {address: 10.0.0.1}\n"
                            "groups:\n  a100:\n    hosts: {alpha: {}}\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert caught.value.line == 2
    assert "'a100'" in str(caught.value) and "group" in str(caught.value)


def test_ansible_host_named_like_a_group_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "all:\n  children:\n    gpus:\n      hosts:\n        g1: {}\n"
                            "    g1:\n      hosts:\n        h: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert caught.value.line == 5


@pytest.mark.parametrize("name", ["all", "adopted"])
def test_reserved_group_names_are_refused(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, "hosts:\n  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.2}\n"
                            f"groups:\n  {name}:\n    hosts: {{a: {{}}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert caught.value.line == 5
    assert "reserved" in str(caught.value)


def test_ansible_adopted_group_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "adopted:\n  hosts:\n    a: {}\n")
    with pytest.raises(ConfigError, match="reserved"):
        load_inventory(path)


def test_ansible_ungrouped_is_selectable(tmp_path: Path) -> None:
    path = _write(tmp_path, "all:\n  hosts:\n    top: {}\n  children:\n    ungrouped:\n"
                            "      hosts:\n        u1: {ansible_host: 10.0.0.9}\n"
                            "        both: {ansible_host: 10.0.0.8}\n"
                            "    gpus:\n      hosts:\n        g1: {ansible_host: 10.0.0.1}\n"
                            "        both: {}\n")
    inv = load_inventory(path)
    assert [h.name for h in select_hosts(inv, "ungrouped")] == ["top", "u1"]
    assert [h.name for h in select_hosts(inv, "@ungrouped")] == ["top", "u1"]
    assert [h.name for h in select_hosts(inv, "all,!gpus")] == ["top", "u1"]
    assert inv.implicit_groups["ungrouped"] == ("top", "u1")
    assert "ungrouped" not in inv.groups  # selectable, but not listed, like `all`


def test_ansible_ungrouped_exists_without_being_declared(tmp_path: Path) -> None:
    path = _write(tmp_path, "all:\n  hosts:\n    lone: {}\n  children:\n    gpus:\n"
                            "      hosts:\n        g1: {}\n")
    inv = load_inventory(path)
    assert [h.name for h in select_hosts(inv, "ungrouped")] == ["lone"]
    assert [h.name for h in select_hosts(inv, "@ungrouped,gpus")] == ["lone", "g1"]
