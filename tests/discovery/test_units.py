"""Inventory appending, endpoint parsing, settings and the auto-adopt policy (no network)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.discovery.adopt import host_name_for, parse_endpoint
from fleet.discovery.autoadopt import AutoAdoptPolicy, discovery_settings
from fleet.discovery.browse import select_interfaces
from fleet.discovery.candidates import CandidateView
from fleet.discovery.inventory_append import append_host
from fleet.errors import ConfigError
from fleet.inventory import load_inventory

FLEET_INVENTORY = """\
# lab inventory: keep this comment
hosts:
  gpu01:
    address: 10.0.0.1   # rack a
  gpu02: {address: 10.0.0.2}

# groups below
groups:
  lab:
    hosts: [gpu01]
"""

ANSIBLE_INVENTORY = """\
all:
  hosts:
    n1:
      ansible_host: 10.1.0.1
  children:
    gpu:
      hosts:
        n1:
"""


def test_append_to_fleet_inventory_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(FLEET_INVENTORY)
    line = append_host(path, name="gpu07", address="10.0.0.7", port=2222, user="lab")
    text = path.read_text()
    assert "# lab inventory: keep this comment" in text and "# rack a" in text
    assert text.splitlines()[line - 1].startswith('  "gpu07":')
    hosts = {spec.name: spec for spec in load_inventory(path).hosts}
    assert (hosts["gpu07"].address, hosts["gpu07"].port, hosts["gpu07"].user) == \
        ("10.0.0.7", 2222, "lab")
    assert set(hosts) == {"gpu01", "gpu02", "gpu07"}


def test_append_to_ansible_inventory_and_to_file_without_hosts(tmp_path: Path) -> None:
    path = tmp_path / "ansible.yaml"
    path.write_text(ANSIBLE_INVENTORY)
    append_host(path, name="n9", address="10.1.0.9", port=22, user=None)
    hosts = {spec.name: spec for spec in load_inventory(path).hosts}
    assert hosts["n9"].address == "10.1.0.9" and "n1" in hosts
    bare = tmp_path / "bare.yaml"
    bare.write_text("# only settings\nsettings:\n  interval_s: 2\n")
    append_host(bare, name="x", address="10.2.0.1", port=22, user=None)
    assert [spec.name for spec in load_inventory(bare).hosts] == ["x"]
    assert bare.read_text().startswith("# only settings")


def test_append_refuses_a_name_that_breaks_the_inventory(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(FLEET_INVENTORY)
    with pytest.raises(ConfigError, match="file left unchanged"):
        append_host(path, name="gpu01", address="10.0.0.9", port=22, user=None)
    assert path.read_text() == FLEET_INVENTORY


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.7", ("10.0.0.7", 22)), ("10.0.0.7:2222", ("10.0.0.7", 2222)),
    ("[fe80::1]:22", ("fe80::1", 22)), ("::1", ("::1", 22)), ("gpu7", None),
])
def test_parse_endpoint(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_endpoint(text) == expected


@pytest.mark.parametrize(("text", "words"), [
    ("[::1", "needs its closing ']'"), ("10.0.0.7:0", "port must be 1-65535"),
])
def test_a_malformed_endpoint_is_refused(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_endpoint(text)


def test_host_names_from_hostile_announcements() -> None:
    assert host_name_for("evil host\x1b[31m", "10.0.0.1") == "evil-host-31m"
    assert host_name_for("\x1b\x07", "10.0.0.1") == "host-10.0.0.1"


def _view(session: str | None, address: str, state: str = "new") -> CandidateView:
    return CandidateView("h", address, 22, ("_fleet._tcp",), 1, None, session, state, None,
                         None, 0, 0, (), (1,))


def test_auto_adopt_policy_needs_session_and_subnet() -> None:
    policy = AutoAdoptPolicy.build("lab-a", ["10.0.0.0/24"])
    assert policy.refusal(_view("lab-a", "10.0.0.5")) is None
    assert "session" in (policy.refusal(_view("lab-b", "10.0.0.5")) or "")
    assert "outside" in (policy.refusal(_view("lab-a", "10.0.1.5")) or "")
    assert "state" in (policy.refusal(_view("lab-a", "10.0.0.5", "known")) or "")
    with pytest.raises(ConfigError):
        AutoAdoptPolicy.build("lab-a", [])
    with pytest.raises(ConfigError, match="subnet"):
        AutoAdoptPolicy.build("lab-a", ["10.0.0.0/99"])


def test_discovery_settings_from_inventory(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts: {}\nsettings:\n  discovery:\n    interfaces: [127.0.0.1]\n"
                    "    service_types: [_fleet._tcp]\n"
                    "    auto_adopt: {session: lab-a, subnets: [10.0.0.0/24]}\n")
    settings = discovery_settings(load_inventory(path))
    assert settings.interfaces == ("127.0.0.1",)
    assert settings.service_types == ("_fleet._tcp",)
    assert settings.auto_adopt is not None and settings.auto_adopt.session == "lab-a"
    path.write_text("hosts: {}\nsettings:\n  discovery:\n    bogus: 1\n")
    with pytest.raises(ConfigError, match="unknown keys"):
        discovery_settings(load_inventory(path))


def test_interface_names_resolve_to_addresses() -> None:
    assert select_interfaces(["lo"]).addresses[0] == "127.0.0.1"
    assert select_interfaces(["127.0.0.1"]).addresses == ("127.0.0.1",)
    with pytest.raises(ConfigError, match="no such interface"):
        select_interfaces(["nonexistent0"])
