"""Inventory loading: fleet and Ansible YAML, errors with file:line, default paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.errors import ConfigError
from fleet.inventory import (
    default_inventory_path,
    load_inventory,
)
from fleet.model import HostSpec
from fleet.monitor.config import inventory_settings

HERE = Path(__file__).parent
GOOD = HERE / "inventories" / "good"
BAD = HERE / "inventories" / "bad"
EXAMPLE = HERE.parent.parent / "inventory.example.yaml"
ERROR_MARK = "# <- error"


def _expect(spec: HostSpec, expected: dict[str, Any]) -> None:
    """Compare the named fields of a spec; `labels` given as a dict."""
    for field, value in expected.items():
        actual = dict(spec.labels) if field == "labels" else getattr(spec, field)
        assert actual == value, f"{spec.name}.{field}: {actual!r} != {value!r}"


GOOD_CASES: list[tuple[Path, dict[str, dict[str, Any]]]] = [
    (
        EXAMPLE,
        {
            "controller": {"address": "127.0.0.1", "connection": "local", "groups": ()},
            "login": {
                "address": "login.lab.example.org",
                "port": 2222,
                "user": "lab",
                "identity_file": "~/.ssh/id_lab",
                "groups": ("lab",),
                "labels": {"role": "login", "site": "bldg-4"},
            },
            "gpu01": {
                "address": "gpu01",
                "port": 22,
                "proxy_jump": "lab@login.lab.example.org:2222",
                "groups": ("gpu", "lab", "a100"),
                "labels": {"site": "bldg-4", "role": "compute", "gpu": "a100", "rack": "a1"},
            },
            "gpu02": {"groups": ("gpu", "a100")},
            "gpu03": {},
            "gpu04": {},
            "h100-a": {
                "address": "10.20.0.11",
                "user": "ml",
                "python": "/opt/conda/bin/python3",
                "labels": {"site": "bldg-4", "role": "compute", "gpu": "h100", "rack": "b2"},
            },
            "h100-b": {"address": "10.20.0.12"},
        },
    ),
    (
        GOOD / "fleet_minimal.yaml",
        {
            "alpha": {"address": "alpha", "port": 22, "user": None, "python": "python3"},
            "beta": {"connection": "ssh", "groups": (), "labels": {}},
        },
    ),
    (
        GOOD / "fleet_inheritance.yaml",
        {
            "workstation": {"connection": "local", "port": 22, "user": "base"},
            "n08": {
                "port": 2200,
                "user": "rack1",
                "identity_file": "~/.ssh/id_cluster",
                "python": "/usr/bin/python3.8",
                "groups": ("cluster", "rack1"),
                "labels": {"site": "main", "tier": "silver", "team": "vision"},
            },
            "n09": {},
            "n10": {},
            "nodea": {"port": 2222},
            "nodeb": {"port": 2222},
            "r2-1": {"address": "10.2.0.1", "port": 2201, "user": "cluster", "python": "python3"},
            "r2-3": {"address": "10.2.0.2", "port": 2202, "groups": ("cluster", "rack2")},
            "r2-5": {"address": "10.2.0.3", "port": 2203},
            "special": {
                "user": "root",
                "python": "python3.11",
                "proxy_jump": "jump.example.org",
                "labels": {
                    "site": "main",
                    "tier": "gold",
                    "team": "infra",
                    "gpus": "8",
                    "spare": "true",
                },
            },
        },
    ),
    (
        GOOD / "ansible_basic.yaml",
        {
            "localhost": {"connection": "local", "python": "python3", "groups": ()},
            "mail.example.org": {"address": "mail.example.org", "port": 2222, "user": "deploy"},
            "gpu01": {
                "identity_file": "~/.ssh/gpu_key",
                "python": "/usr/bin/python3",
                "proxy_jump": "bastion.example.org",
                "groups": ("gpu", "a100"),
                "labels": {"datacenter": "dc1", "cuda": "12.4"},
            },
            "gpu02": {"groups": ("gpu", "lab", "a100")},
            "gpu03": {},
            "hgx1": {
                "address": "10.1.0.5",
                "port": 2022,
                "user": "ml",
                "groups": ("gpu", "lab", "h100"),
                "labels": {
                    "datacenter": "dc1",
                    "cuda": "12.4",
                    "rack": "b2",
                    "maintenance": "false",
                },
            },
        },
    ),
    (
        GOOD / "ansible_toplevel_groups.yaml",
        {
            "web1": {"address": "192.0.2.10", "groups": ("webservers",)},
            "web2": {"address": "192.0.2.11", "proxy_jump": "gw@192.0.2.1"},
            "db1": {"address": "db1", "port": 2200, "groups": ("dbservers",)},
            "mc1": {"address": "mc1", "port": 11211, "groups": ("cache",)},
            "mc2": {"address": "mc2", "port": 11211},
            "fe80::1": {"address": "fe80::1", "port": 2201},
        },
    ),
]


@pytest.mark.parametrize(("path", "expected"), GOOD_CASES, ids=lambda v: getattr(v, "name", ""))
def test_good_inventory_parses_to_expected_hosts(
    path: Path, expected: dict[str, dict[str, Any]]
) -> None:
    inventory = load_inventory(path)
    assert [spec.name for spec in inventory.hosts] == list(expected)
    for spec in inventory.hosts:
        _expect(spec, expected[spec.name])
        file, _, line = spec.source.rpartition(":")
        assert file == str(path) and int(line) > 0
    assert inventory.path == path
    assert len({spec.key for spec in inventory.hosts}) == len(inventory.hosts)


def test_groups_map_to_member_names() -> None:
    inventory = load_inventory(GOOD / "ansible_basic.yaml")
    assert inventory.groups == {
        "gpu": ("gpu01", "gpu02", "gpu03", "hgx1"),
        "a100": ("gpu01", "gpu02", "gpu03"),
        "h100": ("hgx1",),
        "lab": ("gpu02", "hgx1"),
    }
    assert inventory.settings == {} and inventory.settings_line is None


def test_example_settings_are_kept_raw_with_their_line_and_are_valid() -> None:
    inventory = load_inventory(EXAMPLE)
    assert inventory.settings == {"monitor": {"interval": "2s"}}
    assert inventory.settings_line is not None
    line = EXAMPLE.read_text().splitlines()[inventory.settings_line - 1]
    assert line.startswith("settings:")
    assert inventory_settings(inventory).monitor.interval == 2.0


def test_bad_settings_in_an_inventory_name_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts:\n  a: {address: 127.0.0.1}\nsettings:\n  monitor:\n    interval: 7q\n")
    with pytest.raises(ConfigError, match=r"invalid monitor\.interval '7q'") as caught:
        inventory_settings(load_inventory(path))
    assert (caught.value.path, caught.value.line) == (str(path), 5)


BAD_CASES: list[tuple[str, str]] = [
    ("syntax_error.yaml", "YAML syntax error"),
    ("unclosed_flow.yaml", "YAML syntax error"),
    ("empty.yaml", "empty"),
    ("comments_only.yaml", "empty"),
    ("top_level_list.yaml", "must be a mapping"),
    ("unknown_top_key.yaml", "did you mean 'hosts'?"),
    ("unknown_host_key.yaml", "did you mean 'address'?"),
    ("unknown_group_key.yaml", "did you mean 'hosts'?"),
    ("address_in_vars.yaml", "address cannot be set in top-level vars"),
    ("port_not_int.yaml", "must be an integer port"),
    ("port_out_of_range.yaml", "70000 is out of range"),
    ("bad_connection.yaml", "'ssh' or 'local'"),
    ("labels_not_mapping.yaml", "labels must be a mapping"),
    ("label_value_not_scalar.yaml", "must be a single value"),
    ("label_without_equals.yaml", "key=value"),
    ("bad_range.yaml", "bad host range"),
    ("descending_range.yaml", "not increasing"),
    ("huge_range.yaml", "at most"),
    ("address_range_mismatch.yaml", "gives 2 values for 3 hosts"),
    ("address_range_one_host.yaml", "a range in address pairs with a range of host names"),
    ("duplicate_address.yaml", "same address and port (10.0.0.1:22) as host 'gpu01'"),
    ("duplicate_name_conflict.yaml", "at line 3"),
    ("duplicate_yaml_key.yaml", "duplicate key 'gpu01'"),
    ("unknown_child_group.yaml", "did you mean 'h100'?"),
    ("group_cycle.yaml", "group cycle: a -> b -> a"),
    ("bad_version.yaml", "unsupported inventory version 2"),
    ("settings_not_mapping.yaml", "settings must be a mapping"),
    ("bad_host_name.yaml", "without commas"),
    ("ansible_bad_port.yaml", "must be an integer port"),
    ("ansible_bad_connection.yaml", "'winrm' is not supported"),
    ("ansible_unknown_group_key.yaml", "did you mean 'hosts'?"),
    ("ansible_duplicate_address.yaml", "same address and port"),
    ("ansible_conflicting_address.yaml", "'10.0.0.2' here but '10.0.0.1' at line 6"),
    ("ansible_jinja.yaml", "Jinja"),
    ("ansible_hosts_list.yaml", "must be a mapping"),
    ("recursive_alias.yaml", "recursive alias"),
]


def _marked_line(path: Path) -> int | None:
    """The line carrying the `# <- error` marker, or None for files without one."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if ERROR_MARK in line:
            return number
    return None


def test_every_bad_fixture_is_in_the_table() -> None:
    assert sorted(name for name, _ in BAD_CASES) == sorted(p.name for p in BAD.glob("*.yaml"))


@pytest.mark.parametrize(("name", "fragment"), BAD_CASES, ids=[name for name, _ in BAD_CASES])
def test_bad_inventory_names_file_and_line(name: str, fragment: str) -> None:
    path = BAD / name
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    error = caught.value
    assert error.exit_code == 2
    assert error.path == str(path)
    assert error.line == _marked_line(path)
    assert fragment in str(error)
    expected_prefix = f"{path}:{error.line}: " if error.line is not None else f"{path}: "
    assert str(error).startswith(expected_prefix)


def test_duplicate_error_names_both_lines() -> None:
    path = BAD / "duplicate_address.yaml"
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert f"defined at {path}:2" in str(caught.value)
    assert caught.value.line == 4


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as caught:
        load_inventory(missing)
    assert caught.value.path == str(missing) and caught.value.exit_code == 2


def test_directory_and_non_utf8_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_inventory(tmp_path)
    binary = tmp_path / "inv.yaml"
    binary.write_bytes(b"hosts: [\xff\xfe]\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_inventory(binary)


def test_unsafe_yaml_tags_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n  a:\n    user: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert caught.value.line == 3


def test_format_can_be_forced(tmp_path: Path) -> None:
    # A top-level group called `hosts` reads as fleet's format unless Ansible is forced.
    path = tmp_path / "inv.yaml"
    path.write_text("hosts:\n  hosts:\n    web1:\n      ansible_port: 2022\n")
    with pytest.raises(ConfigError, match="unknown key 'web1' in host 'hosts'"):
        load_inventory(path)
    forced = load_inventory(path, fmt="ansible")
    assert [(h.name, h.port, h.groups) for h in forced.hosts] == [("web1", 2022, ("hosts",))]
    with pytest.raises(ConfigError, match="unknown key 'all'"):
        load_inventory(GOOD / "ansible_basic.yaml", fmt="fleet")
    with pytest.raises(ConfigError, match="unknown inventory format"):
        load_inventory(path, fmt="toml")


def test_no_inventory_means_local_machine_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_inventory_path() is None
    inventory = load_inventory()
    assert inventory.path is None and inventory.groups == {}
    [local] = inventory.hosts
    assert (local.name, local.address, local.connection) == ("localhost", "127.0.0.1", "local")


def test_default_path_prefers_cwd_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    home_file = home / ".config" / "fleet" / "inventory.yaml"
    home_file.parent.mkdir(parents=True)
    home_file.write_text("hosts: [from-home]\n")
    assert default_inventory_path() == home_file
    xdg_file = tmp_path / "xdg" / "fleet" / "inventory.yaml"
    xdg_file.parent.mkdir(parents=True)
    xdg_file.write_text("hosts: [from-xdg]\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_inventory_path() == xdg_file
    (tmp_path / "inventory.yaml").write_text("hosts: [from-cwd]\n")
    assert default_inventory_path() == tmp_path / "inventory.yaml"
    assert [h.name for h in load_inventory().hosts] == ["from-cwd"]


# --- host ranges -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    ("hosts: {a: {address: 10.0.0.1, identity_file: DIR}}",
     "identity_file 'DIR' is a directory, not a key file"),
    ("hosts: {a: {address: 10.0.0.1, proxy_jump: '10.0.0.2:99999'}}",
     "proxy_jump: invalid port in jump host '10.0.0.2:99999'"),
    ("hosts: {a: {address: 10.0.0.1, proxy_jump: 'bastion:abc'}}",
     "proxy_jump: invalid port in jump host 'bastion:abc'"),
    ("all: {hosts: {a: {ansible_host: 10.0.0.1, ansible_ssh_common_args: '-J b:0'}}}",
     "ansible_ssh_common_args: invalid port in jump host 'b:0'"),
    ("all: {hosts: {a: {ansible_host: 10.0.0.1, ansible_ssh_private_key_file: DIR}}}",
     "ansible_ssh_private_key_file 'DIR' is a directory"),
])
def test_a_jump_or_key_file_fleet_cannot_use_is_an_inventory_error(
        tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(text.replace("DIR", str(tmp_path)) + "\n")
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    assert words.replace("DIR", str(tmp_path)) in str(caught.value)
    assert (caught.value.path, caught.value.line) == (str(path), 1)


def test_a_good_jump_chain_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts: {a: {address: 10.0.0.1, proxy_jump: 'u@[::1]:2222,b:22'}}\n")
    assert load_inventory(path).hosts[0].proxy_jump == "u@[::1]:2222,b:22"


def test_an_ini_inventory_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[web]\nhost1 ansible_host=10.0.0.1\n\n[db]\nhost2\n")
    with pytest.raises(ConfigError, match="looks like an INI file") as caught:
        load_inventory(path)
    assert "ansible-inventory -i FILE --list --yaml" in str(caught.value)


def test_a_directory_where_the_default_inventory_goes_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "inventory.yaml").mkdir()
    with pytest.raises(ConfigError, match="not an inventory file") as caught:
        load_inventory(None)
    assert caught.value.path == str(tmp_path / "inventory.yaml")


def test_a_misspelt_key_in_an_ansible_group_is_named_in_its_group(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("webservers:\n  hosts:\n    a: {ansible_host: 10.0.0.1}\n  varz: {x: 1}\n")
    with pytest.raises(ConfigError, match="unknown key 'varz' in group 'webservers'") as caught:
        load_inventory(path)
    assert "did you mean 'vars'?" in str(caught.value) and caught.value.line == 4
