"""`fleet status` over real SSH (asyncssh server on 127.0.0.1) and the host-key policy."""

from __future__ import annotations

import asyncssh

from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from tests.cli.conftest import FleetCli
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory


def _inventory(fleet_cli: FleetCli, handles: list[SimHostHandle]) -> None:
    lines = ["hosts:"]
    for handle in handles:
        spec = handle.spec
        lines += [f"  {spec.name}:", f"    address: {spec.address}", f"    port: {spec.port}",
                  f"    user: {spec.user}", f"    identity_file: {spec.identity_file}"]
    (fleet_cli.home / "inventory.yaml").write_text("\n".join(lines) + "\n")


async def _start(sim_ssh_host: SimSshHostFactory, sim_tools: SimTools, fleet_cli: FleetCli,
                 name: str, gpus: scenarios.SimHostGpus,
                 host_key: asyncssh.SSHKey | None = None) -> SimHostHandle:
    config = fleet_cli.home / f"{name}.gpus.conf"
    write_config(config, gpus)
    return await sim_ssh_host(name, env=sim_tools.env(config), host_key=host_key)


async def test_status_over_ssh_reports_each_hosts_gpus(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    first = await _start(sim_ssh_host, sim_tools, fleet_cli, "alpha",
                         scenarios.busy(2, host="alpha"))
    second = await _start(sim_ssh_host, sim_tools, fleet_cli, "beta",
                          scenarios.idle(4, host="beta"))
    _inventory(fleet_cli, [first, second])

    result = await fleet_cli.run("--json", "status", "--accept-new", "--timeout", "30s")

    assert result.returncode == 0, result.stderr
    hosts = {host["name"]: host for host in result.json()["hosts"]}
    assert [g["uuid"] for g in hosts["alpha"]["gpus"]] == \
        [scenarios.gpu_uuid("alpha", i) for i in range(2)]
    assert [g["utilization_gpu_pct"] for g in hosts["alpha"]["gpus"]] == [97, 97]
    assert [g["uuid"] for g in hosts["beta"]["gpus"]] == \
        [scenarios.gpu_uuid("beta", i) for i in range(4)]
    assert all(host["state"] == "up" and host["method"] == "nvml" for host in hosts.values())


async def test_host_key_policy_unknown_refused_accept_new_pins_changed_refused(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    handle = await _start(sim_ssh_host, sim_tools, fleet_cli, "gamma",
                          scenarios.idle(1, host="gamma"))
    _inventory(fleet_cli, [handle])
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"

    unknown = await fleet_cli.run("--json", "status")
    assert unknown.returncode == 3
    (host,) = unknown.json()["hosts"]
    assert host["state"] == "host_key_rejected"
    assert "SHA256:" in host["reason"] and "--accept-new" in host["reason"]
    assert not pinned.exists() or handle.spec.address not in pinned.read_text()

    accepted = await fleet_cli.run("--json", "status", "--accept-new")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert pinned.stat().st_mode & 0o777 == 0o600
    assert str(handle.port) in pinned.read_text()

    again = await fleet_cli.run("--json", "status")
    assert again.returncode == 0
    assert again.json()["hosts"][0]["gpus"][0]["uuid"] == scenarios.gpu_uuid("gamma", 0)

    # The same (address, port) now answers with another key: a re-keyed or spoofed host.
    await handle.host.stop()
    impostor = await _start(sim_ssh_host, sim_tools, fleet_cli, "gamma2",
                            scenarios.idle(1, host="gamma2"))
    old_field, new_field = f"[127.0.0.1]:{handle.port}", f"[127.0.0.1]:{impostor.port}"
    pinned.write_text(pinned.read_text().replace(old_field, new_field))
    inventory = fleet_cli.home / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace(f"port: {handle.port}",
                                                       f"port: {impostor.port}"))

    changed = await fleet_cli.run("--json", "status", "--accept-new")

    assert changed.returncode == 3
    (host,) = changed.json()["hosts"]
    assert host["state"] == "host_key_rejected"
    assert "changed" in host["reason"].lower()
    assert str(pinned) in host["reason"]
    assert host["gpus"] == []


async def test_status_table_and_hosts_list_after_probe(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    handle = await _start(sim_ssh_host, sim_tools, fleet_cli, "delta",
                          scenarios.gpu_lost(2, lost_index=0, host="delta"))
    _inventory(fleet_cli, [handle])

    table = await fleet_cli.run("status", "--accept-new")
    listing = await fleet_cli.run("--json", "hosts")

    assert table.returncode == 0, table.stderr
    assert "delta" in table.stdout and "GPU LOST" in table.stdout
    assert scenarios.gpu_uuid("delta", 1) in table.stdout
    (host,) = listing.json()["hosts"]
    assert host["state"] == "up" and host["gpu_count"] == 2


async def test_unreachable_host_is_a_row_not_a_crash(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    handle = await _start(sim_ssh_host, sim_tools, fleet_cli, "epsilon",
                          scenarios.idle(1, host="epsilon"))
    _inventory(fleet_cli, [handle])
    inventory = fleet_cli.home / "inventory.yaml"
    inventory.write_text(inventory.read_text()
                         + "  closed:\n    address: 127.0.0.1\n    port: 1\n")

    result = await fleet_cli.run("--json", "status", "--accept-new", "--timeout", "10s")

    assert result.returncode == 3
    hosts = {host["name"]: host for host in result.json()["hosts"]}
    assert hosts["epsilon"]["state"] == "up"
    assert hosts["closed"]["state"] == "unreachable"
    assert "refused" in hosts["closed"]["reason"]
