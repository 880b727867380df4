"""Inventories, continued: host ranges, ~/.ssh/config, host selection, YAML bombs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.errors import ConfigError
from fleet.inventory import (
    Inventory,
    expand_host_range,
    load_inventory,
    load_ssh_config_hosts,
    resolve_ssh_config,
    select_hosts,
)
from fleet.model import HostSpec
from tests.unit.test_inventory import EXAMPLE


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[1:3]", ["gpu1", "gpu2", "gpu3"]),
        ("gpu[8:10]", ["gpu8", "gpu9", "gpu10"]),
        ("n[001:002].lab", ["n001.lab", "n002.lab"]),
        ("node[a:c]", ["nodea", "nodeb", "nodec"]),
        ("x[A:B]", ["xA", "xB"]),
        ("n[0:6:3]", ["n0", "n3", "n6"]),
        ("n[:1]", ["n0", "n1"]),
        ("r[1:2]-g[a:b]", ["r1-ga", "r1-gb", "r2-ga", "r2-gb"]),
    ],
)
def test_expand_host_range(pattern: str, expected: list[str]) -> None:
    assert expand_host_range(pattern) == expected


@pytest.mark.parametrize(
    "pattern",
    [
        "gpu[1-3]",
        "gpu[3:1]",
        "gpu[1:3",
        "gpu1:3]",
        "gpu[a:3]",
        "gpu[aa:b]",
        "gpu[1:3:0]",
        "gpu[b:a]",
        "gpu[a:C]",
        "n[0:20000]",
        "gpu[]",
    ],
)
def test_expand_host_range_rejects_bad_patterns(pattern: str) -> None:
    with pytest.raises(ConfigError) as caught:
        expand_host_range(pattern)
    assert pattern in str(caught.value) and caught.value.exit_code == 2


@given(st.integers(0, 500), st.integers(0, 60), st.integers(1, 4))
def test_numeric_range_count_and_padding(start: int, span: int, width: int) -> None:
    first = str(start).zfill(width)
    last = str(start + span).zfill(width)
    names = expand_host_range(f"h[{first}:{last}]")
    assert len(names) == span + 1
    assert [int(name[1:]) for name in names] == list(range(start, start + span + 1))
    if first.startswith("0") and len(first) > 1:
        assert all(len(name) - 1 >= len(first) for name in names)
    else:
        assert names[0] == f"h{start}"


# --- ~/.ssh/config ---------------------------------------------------------------------------

SSH_CONFIG = """\
Host gpu01
    HostName 10.0.0.1
    Port 2201
    User alice
    IdentityFile ~/.ssh/id_gpu
    ProxyJump jump@bastion

Host gpu*
    User bob
    IdentityFile /keys/fallback

Host alias-one alias-two
    HostName 10.0.0.9

Host *.wild !excluded
    Port 2022

Host = eq-host
	HostName=10.0.0.20
"""


@pytest.fixture
def ssh_config(tmp_path: Path) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(SSH_CONFIG)
    return path


def test_ssh_config_fills_unset_fields(ssh_config: Path) -> None:
    spec = resolve_ssh_config(HostSpec(name="gpu01", address="gpu01"), ssh_config)
    assert (spec.address, spec.port, spec.user) == ("10.0.0.1", 2201, "alice")
    # Both blocks match gpu01: ssh offers both keys, in the config's order.
    assert spec.ssh_config_identity_files == ("~/.ssh/id_gpu", "/keys/fallback")
    assert spec.identity_file is None
    assert spec.proxy_jump == "jump@bastion"
    # HostName replaced the address: connections look the config up by the alias, as ssh does.
    assert spec.ssh_config_host == "gpu01"
    assert resolve_ssh_config(spec, ssh_config).ssh_config_host == "gpu01"  # kept on a re-read
    other = resolve_ssh_config(HostSpec(name="gpu07", address="gpu07"), ssh_config)
    assert (other.address, other.port, other.user) == ("gpu07", 22, "bob")
    assert other.ssh_config_identity_files == ("/keys/fallback",) and other.proxy_jump is None
    assert other.ssh_config_host is None  # no HostName: looked up by its address already


def test_ssh_config_never_overrides_explicit_values(ssh_config: Path) -> None:
    spec = HostSpec(name="gpu01", address="gpu01", port=22, user="carol")
    resolved = resolve_ssh_config(spec, ssh_config, explicit={"port", "user"})
    assert (resolved.address, resolved.port, resolved.user) == ("10.0.0.1", 22, "carol")
    local = HostSpec(name="gpu01", address="gpu01", connection="local")
    assert resolve_ssh_config(local, ssh_config) is local


def test_load_inventory_resolves_through_ssh_config(tmp_path: Path, ssh_config: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "groups:\n  gpu:\n    vars: {user: team}\n    hosts:\n      gpu01:\n"
        "      gpu02: {port: 2200}\n      me: {connection: local}\n"
    )
    inventory = load_inventory(path, ssh_config=ssh_config)
    gpu01, gpu02, me = inventory.hosts
    # The group's user and the host's port are inventory values: they beat the ssh config.
    assert (gpu01.address, gpu01.port, gpu01.user) == ("10.0.0.1", 2201, "team")
    assert gpu01.proxy_jump == "jump@bastion" and gpu01.source == f"{path}:5"
    assert (gpu02.address, gpu02.port, gpu02.user) == ("gpu02", 2200, "team")
    assert gpu02.ssh_config_identity_files == ("/keys/fallback",)
    assert (me.address, me.connection) == ("me", "local")


def test_ssh_config_can_create_duplicates(tmp_path: Path, ssh_config: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n  alias-one:\n  alias-two:\n")
    with pytest.raises(ConfigError, match="same address and port") as caught:
        load_inventory(path, ssh_config=ssh_config)
    assert caught.value.line == 3 and f"{path}:2" in str(caught.value)


def test_ssh_config_hosts_are_listed_and_merged(tmp_path: Path, ssh_config: Path) -> None:
    hosts = load_ssh_config_hosts(ssh_config)
    assert [(h.name, h.address, h.port) for h in hosts] == [
        ("gpu01", "10.0.0.1", 2201),
        ("alias-one", "10.0.0.9", 22),
        ("eq-host", "10.0.0.20", 22),
    ]
    assert [h.source for h in hosts] == [f"{ssh_config}:{line}" for line in (1, 12, 18)]
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n  first:\n    address: 10.0.0.9\n  gpu01:\n")
    inventory = load_inventory(path, ssh_config=ssh_config, ssh_config_hosts=True)
    # 10.0.0.9:22 is already `first` and gpu01 is in the inventory: only eq-host is added.
    assert [(h.name, h.address) for h in inventory.hosts] == [
        ("first", "10.0.0.9"),
        ("gpu01", "10.0.0.1"),
        ("eq-host", "10.0.0.20"),
    ]
    extra = tmp_path / "extra_config"
    extra.write_text(f"Include {ssh_config}\nHost solo\n    Port 2300\n")
    assert [(h.name, h.port) for h in load_ssh_config_hosts(extra)] == [
        ("gpu01", 2201),
        ("alias-one", 22),
        ("eq-host", 22),
        ("solo", 2300),
    ]


def test_ssh_config_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "ssh_config"
    path.write_text("Host gpu01\n    Port not-a-number\n")
    with pytest.raises(ConfigError) as caught:
        resolve_ssh_config(HostSpec(name="gpu01", address="gpu01"), path)
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    with pytest.raises(ConfigError, match="not found"):
        load_ssh_config_hosts(tmp_path / "missing")


# --- select_hosts ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> Inventory:
    return load_inventory(EXAMPLE)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (None, "controller login gpu01 gpu02 gpu03 gpu04 h100-a h100-b"),
        ("", "controller login gpu01 gpu02 gpu03 gpu04 h100-a h100-b"),
        ("gpu0[12]", "gpu01 gpu02"),
        ("login,gpu0*", "login gpu01 gpu02 gpu03 gpu04"),
        ("gpu04,login", "login gpu04"),
        ("h100", "h100-a h100-b"),
        ("@lab", "login gpu01"),
        ("@a1*", "gpu01 gpu02 gpu03 gpu04"),
        ("@all", "controller login gpu01 gpu02 gpu03 gpu04 h100-a h100-b"),
        ("label:rack=b2", "h100-a h100-b"),
        ("label:role=comp*", "gpu01 gpu02 gpu03 gpu04 h100-a h100-b"),
        ("label:rack", "gpu01 gpu02 gpu03 gpu04 h100-a h100-b"),
        ("@gpu,!gpu02,!label:gpu=h100", "gpu01 gpu03 gpu04"),
        ("!@gpu", "controller login"),
        ("gpu01,@lab,gpu01", "login gpu01"),
    ],
)
def test_select_hosts(example: Inventory, pattern: str | None, expected: str) -> None:
    assert [spec.name for spec in select_hosts(example, pattern)] == expected.split()


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [
        ("gpu99", ""),
        ("logn", "did you mean 'login'?"),
        ("@a10", "did you mean '@a100'?"),
        ("label:rack=c9", ""),
        ("gpu01,!nothing*", ""),
    ],
)
def test_select_hosts_rejects_patterns_matching_nothing(
    example: Inventory, pattern: str, hint: str
) -> None:
    with pytest.raises(ConfigError, match="matches no host") as caught:
        select_hosts(example, pattern)
    assert hint in str(caught.value) and caught.value.exit_code == 2


@pytest.mark.parametrize("pattern", ["!@all", "gpu01,!gpu0*", "!controller,!login,!@gpu"])
def test_a_pattern_whose_exclusions_leave_nothing_is_refused(
        example: Inventory, pattern: str) -> None:
    with pytest.raises(ConfigError, match="leaves no host") as caught:
        select_hosts(example, pattern)
    assert caught.value.exit_code == 2


def test_settings_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["hosts: [a]", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 7):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"l{level}: &l{level} [{refs}]")
    lines[1:] = [f"  {line}" for line in lines[1:]]
    text = "\n".join([lines[0], "settings:", *lines[1:], "  bomb: *l6"]) + "\n"
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    # Ten million values: refused by the document-wide alias check before settings are built.
    with pytest.raises(ConfigError, match="more than 4,000,000 YAML nodes") as caught:
        load_inventory(path)
    assert caught.value.line is not None
