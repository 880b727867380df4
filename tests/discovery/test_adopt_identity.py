"""Adoption must never manage one machine twice, nor miss a host no longer in the inventory.

Real SSH to SimSshHost on 127.0.0.1; no mDNS needed (adoption by ADDRESS:PORT).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from db.hosts import sync_hosts
from db.types import HostFacts
from fleet.discovery.adopt import resolve_target
from fleet.errors import ConfigError
from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.sim.build import SimTools
from fleet.sim.sshhost import known_hosts_line
from fleet.ssh.options import SshOptions
from tests.discovery.test_adopt import start_gpu_host
from tests.fixtures.sshserver import SimSshHostFactory


def make_fleet(tmp_path: Path, options: SshOptions, inventory: Inventory) -> Fleet:
    return Fleet(open_database(str(tmp_path / "fleet.db")), inventory, options)


def inventory_of(*specs: object, groups: dict[str, tuple[str, ...]] | None = None) -> Inventory:
    return Inventory(hosts=tuple(specs), path=None, groups=groups or {},  # type: ignore[arg-type]
                     settings={}, settings_line=None)


async def test_adopt_by_ip_of_host_the_inventory_names_by_dns_name_adds_nothing(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "alpha", 2)
    spec = dataclasses.replace(handle.spec, address="localhost")
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory_of(spec))
    try:
        result = await fleet.adopt(f"127.0.0.1:{handle.port}", accept_new=True, name="alpha-ip")
        assert result.already_known_as == spec.name
        assert [s.name for s in fleet.hosts()] == [spec.name]
    finally:
        fleet.close()


async def test_adopt_of_an_endpoint_presenting_a_managed_hosts_key_adds_nothing(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "beta", 1)
    # The inventory knows this machine at another endpoint, with this key pinned there.
    other = dataclasses.replace(handle.spec, name="beta-vip", address="127.0.0.9", port=2222)
    pinned = sim_ssh_options.pinned_hosts_file
    pinned.parent.mkdir(parents=True, exist_ok=True)
    pinned.write_text(known_hosts_line("127.0.0.9", 2222, handle.host_key) + "\n")
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory_of(other))
    try:
        result = await fleet.adopt(f"127.0.0.1:{handle.port}", accept_new=True)
        assert result.already_known_as == "beta-vip" and not result.newly_pinned
        assert [s.name for s in fleet.hosts()] == ["beta-vip"]
    finally:
        fleet.close()
    assert f"[127.0.0.1]:{handle.port}" not in pinned.read_text()  # nothing pinned


async def test_host_removed_from_inventory_can_be_adopted(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    handle = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "gamma", 1)
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory_of())
    try:
        with fleet.database.session() as session:  # a row left from an older inventory
            sync_hosts(session, [HostFacts(name="gamma", address="127.0.0.1", port=handle.port,
                                           source="inventory")], int(time.time()))
        result = await fleet.adopt(f"127.0.0.1:{handle.port}", accept_new=True)
        assert result.already_known_as is None and result.name == "gamma"
        assert [s.name for s in fleet.hosts()] == ["gamma"]
    finally:
        fleet.close()


@pytest.mark.parametrize("name", ["x,y", " ", "!z", "@g", "all", "adopted", "a100", "A100"])
async def test_adopt_refuses_names_hosts_cannot_select(
    tmp_path: Path, sim_ssh_options: SshOptions, name: str,
) -> None:
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory_of(groups={"a100": ()}))
    try:
        with pytest.raises(ConfigError, match="--name"):
            await fleet.adopt("127.0.0.1:1", accept_new=True, name=name)
    finally:
        fleet.close()


async def test_operator_name_taken_says_taken_not_spoof(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions,
) -> None:
    taken = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "taken", 1)
    newcomer = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "newcomer", 1)
    pinned = sim_ssh_options.pinned_hosts_file
    pinned.parent.mkdir(parents=True, exist_ok=True)
    pinned.write_text(taken.known_hosts_line + "\n")
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory_of(taken.spec))
    try:
        with pytest.raises(ConfigError, match="already used by"):
            await fleet.adopt(f"127.0.0.1:{newcomer.port}", accept_new=True,
                              name=taken.spec.name)
    finally:
        fleet.close()


def test_host_colon_port_is_an_address_not_a_candidate_name() -> None:
    target = resolve_target("localhost:2222", [])
    assert (target.address, target.port) == ("localhost", 2222)
    with pytest.raises(ConfigError, match="no discovered host named"):
        resolve_target("gpu7", [])
