"""`--inventory-append` on Ansible inventories, and a failed append pins nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.discovery.inventory_append import append_host
from fleet.errors import ConfigError
from fleet.inventory import load_inventory
from fleet.sim.build import SimTools
from fleet.ssh.options import SshOptions
from tests.discovery.test_adopt import make_fleet, start_gpu_host
from tests.fixtures.sshserver import SimSshHostFactory

ANSIBLE_WITHOUT_ALL = """\
# my ansible inventory
gpus:
  hosts:
    alpha:
      ansible_host: 127.0.0.1
      ansible_port: 22411
"""


def test_append_to_ansible_inventory_without_all(tmp_path: Path) -> None:
    path = tmp_path / "ans.yaml"
    path.write_text(ANSIBLE_WITHOUT_ALL)
    line = append_host(path, name="zeta", address="127.0.0.1", port=22416, user="lab")
    text = path.read_text()
    assert text.startswith(ANSIBLE_WITHOUT_ALL)
    assert text.splitlines()[line - 1].strip().startswith('"zeta":')
    inventory = load_inventory(path)
    hosts = {spec.name: spec for spec in inventory.hosts}
    assert (hosts["zeta"].address, hosts["zeta"].port, hosts["zeta"].user) == \
        ("127.0.0.1", 22416, "lab")
    assert "alpha" in hosts and "alpha" in inventory.groups["gpus"]


def test_check_append_refuses_what_append_refuses_and_writes_nothing(tmp_path: Path) -> None:
    from fleet.discovery.inventory_append import check_append

    ansible = tmp_path / "ans.yaml"
    ansible.write_text(ANSIBLE_WITHOUT_ALL)
    check_append(ansible, name="zeta", address="127.0.0.1", port=22416, user=None)
    assert ansible.read_text() == ANSIBLE_WITHOUT_ALL
    ansible.unlink()
    path = tmp_path / "flow.yaml"
    path.write_text("hosts: {a: {address: 10.0.0.1}}\n")
    with pytest.raises(ConfigError, match="add the host by hand"):
        check_append(path, name="b", address="10.0.0.2", port=22, user=None)
    taken = tmp_path / "taken.yaml"
    taken.write_text("hosts:\n  a:\n    address: 10.0.0.1\n")
    with pytest.raises(ConfigError, match="file left unchanged") as caught:
        check_append(taken, name="a", address="10.0.0.2", port=22, user=None)
    assert str(taken) in str(caught.value)
    assert {p.name for p in tmp_path.iterdir()} == {"flow.yaml", "taken.yaml"}  # no temp left


async def test_failed_inventory_append_pins_nothing(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "zeta", 1)
    path = tmp_path / "inv.yaml"
    text = "hosts: {a: {address: 10.0.0.1}}\n"  # flow style: nothing can be appended
    path.write_text(text)
    fleet = make_fleet(tmp_path, sim_ssh_options, load_inventory(path))
    try:
        with pytest.raises(ConfigError, match="add the host by hand"):
            await fleet.adopt(f"127.0.0.1:{handle.port}", accept_new=True,
                              inventory_append=True, name="zeta")
        assert [spec.name for spec in fleet.hosts()] == ["a"]
    finally:
        fleet.close()
    pinned = sim_ssh_options.pinned_hosts_file
    assert not pinned.exists() or f"]:{handle.port} " not in pinned.read_text()
    assert path.read_text() == text
