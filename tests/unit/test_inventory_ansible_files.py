"""Ansible inventories: group_vars/ and host_vars/ beside the file, empty groups, INI text."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import ConfigError
from fleet.inventory import ansible, load_inventory

INVENTORY = "all:\n  children:\n    gpus:\n      hosts:\n        gpu1:\n        gpu2:\n"


def _write(base: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return base / "hosts.yaml"


def test_host_vars_and_group_vars_files_apply(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "hosts.yaml": INVENTORY,
        "host_vars/gpu1.yml": "ansible_host: 10.0.0.1\nansible_port: 2222\nrack: r7\n",
        "host_vars/gpu2.yaml": "ansible_host: 10.0.0.2\n",
        "group_vars/gpus.yml": "ansible_user: lab\n",
        "group_vars/all.yml": "ansible_user: nobody\nansible_python_interpreter: /opt/py\n",
    })
    gpu1, gpu2 = load_inventory(path).hosts
    assert (gpu1.address, gpu1.port, gpu1.user, gpu1.python) == ("10.0.0.1", 2222, "lab", "/opt/py")
    assert dict(gpu1.labels) == {"rack": "r7"}
    assert (gpu2.address, gpu2.port, gpu2.user) == ("10.0.0.2", 22, "lab")


def test_vars_files_override_the_inventory_at_their_own_level(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "hosts.yaml": (
            "all:\n  vars: {ansible_user: inline-all, ansible_port: 2200}\n  children:\n"
            "    gpus:\n      vars: {ansible_user: inline-group}\n      hosts:\n"
            "        gpu1: {ansible_host: 10.0.0.9, ansible_port: 2201}\n"
            "        gpu2: {ansible_user: inline-host}\n"
        ),
        "group_vars/all.yaml": "ansible_port: 2300\n",
        "group_vars/gpus": "ansible_user: file-group\n",  # no extension, as Ansible allows
        "host_vars/gpu1.yml": "ansible_host: 10.0.0.1\n",
    })
    gpu1, gpu2 = load_inventory(path).hosts
    # host_vars file > inline host var; the host's own port still beats any group's.
    assert (gpu1.address, gpu1.port, gpu1.user) == ("10.0.0.1", 2201, "file-group")
    # the inline host var beats every group's file; group_vars/all beats inline all vars.
    assert (gpu2.address, gpu2.port, gpu2.user) == ("gpu2", 2300, "inline-host")


def test_a_vars_directory_is_read_in_sorted_order(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "hosts.yaml": INVENTORY,
        "host_vars/gpu1/10-net.yml": "ansible_host: 10.0.0.1\nansible_user: first\n",
        "host_vars/gpu1/20-user.yaml": "ansible_user: second\n",
        "host_vars/gpu1/sub/30.json": '{"ansible_port": 2222}\n',
        "host_vars/gpu1/notes.txt": "ansible_user: ignored\n",
        "host_vars/gpu1/.hidden.yml": "ansible_user: ignored\n",
        "host_vars/gpu1/99.yml~": "ansible_user: ignored\n",
        "host_vars/gpu1/empty.yml": "# nothing\n",
    })
    gpu1 = load_inventory(path).hosts[0]
    assert (gpu1.address, gpu1.port, gpu1.user) == ("10.0.0.1", 2222, "second")


def test_the_first_extension_found_is_the_only_one_read(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "hosts.yaml": INVENTORY,
        "host_vars/gpu1.yml": "ansible_user: yml\n",
        "host_vars/gpu1.yaml": "ansible_user: yaml\n",
    })
    assert load_inventory(path).hosts[0].user == "yml"


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("ansible_user: lab\nansible_port: 99999\n", 2, "out of range"),
    ("ansible_user: lab\nansible_host: [a, b\n", 3, "YAML syntax error"),
    ("- ansible_user\n", 1, "must be a mapping"),
    ("ansible_host: '{{ x }}'\n", 1, "Jinja"),
])
def test_an_error_in_a_vars_file_names_that_file_and_line(
        tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = _write(tmp_path, {"hosts.yaml": INVENTORY, "group_vars/gpus.yml": text})
    with pytest.raises(ConfigError, match=fragment) as caught:
        load_inventory(path)
    assert caught.value.path == str(tmp_path / "group_vars" / "gpus.yml")
    assert caught.value.line == line


def test_vars_files_share_the_inventory_size_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ansible, "MAX_INVENTORY_BYTES", 40)
    path = _write(tmp_path, {
        "hosts.yaml": INVENTORY,
        "host_vars/gpu1.yml": "ansible_host: 10.0.0.1\n",  # 23 bytes
        "host_vars/gpu2.yml": "ansible_host: 10.0.0.2\n",  # 46 in all
    })
    with pytest.raises(ConfigError, match="limit of 40 bytes") as caught:
        load_inventory(path)
    assert caught.value.path == str(tmp_path / "host_vars" / "gpu2.yml")


def test_group_vars_for_ungrouped_apply_to_hosts_in_no_group(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "hosts.yaml": (
            "all:\n  hosts:\n    solo:\n  children:\n    gpus:\n      hosts:\n        gpu1:\n"
        ),
        "group_vars/ungrouped.yml": "ansible_user: lonely\n",
    })
    inventory = load_inventory(path)
    users = {host.name: host.user for host in inventory.hosts}
    assert users == {"solo": "lonely", "gpu1": None}
    assert set(inventory.groups) == {"gpus"}


def test_a_relative_inventory_path_finds_its_vars_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "ans", {"hosts.yaml": INVENTORY, "host_vars/gpu1.yml": "ansible_port: 2\n"})
    monkeypatch.chdir(tmp_path)
    assert load_inventory(Path("ans/hosts.yaml")).hosts[0].port == 2


def test_an_empty_ansible_group_beside_others_is_still_ansible(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("gpus:\n  hosts:\n    gpu1:\n      ansible_host: 10.0.0.1\nspare:\n")
    inventory = load_inventory(path)
    assert [host.address for host in inventory.hosts] == ["10.0.0.1"]
    assert inventory.groups == {"gpus": ("gpu1",), "spare": ()}


def test_a_file_of_only_empty_keys_is_still_read_as_fleet_format(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("gruops:\n")
    with pytest.raises(ConfigError, match="did you mean 'groups'"):
        load_inventory(path)


@pytest.mark.parametrize("text", [
    "gpu1 ansible_host=10.0.0.1\ngpu2 ansible_host=10.0.0.2\n",
    "[gpus]\n",
    "gpu0\n[gpus]\ngpu1\n",
])
def test_ini_text_that_yaml_reads_is_named_as_ini(tmp_path: Path, text: str) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    with pytest.raises(ConfigError, match="looks like an INI file") as caught:
        load_inventory(path)
    assert "ansible-inventory -i FILE --list --yaml" in str(caught.value)


def test_a_yaml_list_is_not_called_ini(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("- gpu1\n- gpu2\n")
    with pytest.raises(ConfigError, match="must be a mapping, not a list") as caught:
        load_inventory(path)
    assert "INI" not in str(caught.value)
