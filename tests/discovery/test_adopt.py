"""Adoption over real SSH (SimSshHost on 127.0.0.1) of hosts announced over loopback mDNS."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import asyncssh
import pytest

from db.events import list_events
from db.host_reads import list_hosts
from db.sql import SessionReader
from fleet.discovery.autoadopt import AutoAdoptPolicy
from fleet.errors import HostKeyRejected
from fleet.inventory import Inventory
from fleet.service import Fleet, open_database
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.sim.sshhost import known_hosts_line
from fleet.ssh.options import SshOptions
from tests.cli.conftest import FleetCli
from tests.discovery.conftest import LOOPBACK, LoopbackRegistry, discover_until_listed
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory, SshKeys

BROWSE = ["--interface", LOOPBACK, "--timeout", "2s"]


async def start_gpu_host(sim_ssh_host: SimSshHostFactory, sim_tools: SimTools, home: Path,
                         name: str, count: int) -> SimHostHandle:
    config = home / f"{name}.gpus.conf"
    write_config(config, scenarios.idle(count, host=name))
    return await sim_ssh_host(name, env=sim_tools.env(config))


async def announce_host(registry: LoopbackRegistry, handle: SimHostHandle, instance: str,
                        session: str, gpus: int) -> None:
    await registry.register("_fleet._tcp", instance, port=handle.port, properties={
        "v": "1", "session": session, "ssh_port": str(handle.port), "gpus": str(gpus)})


@pytest.mark.slow
async def test_adopt_shows_fingerprint_pins_it_and_status_includes_host(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    ssh_keys: SshKeys, loopback_registry: LoopbackRegistry, token: str,
) -> None:
    handle = await start_gpu_host(sim_ssh_host, sim_tools, fleet_cli.home, "adoptee", 2)
    instance = f"adoptee-{token}"
    await announce_host(loopback_registry, handle, instance, "lab-a", 2)
    (fleet_cli.home / ".ssh").mkdir()
    shutil.copy(ssh_keys.private_path, fleet_cli.home / ".ssh" / "id_ed25519")
    fingerprint = handle.host_key.convert_to_public().get_fingerprint("sha256")

    found = await discover_until_listed(fleet_cli, instance, *BROWSE)
    assert found[instance]["state"] == "new"

    shown = await fleet_cli.run("adopt", instance)
    assert shown.returncode == 3, shown.stdout + shown.stderr
    assert fingerprint in shown.stderr and "--accept-new" in shown.stderr

    adopted = await fleet_cli.run("adopt", instance, "--accept-new")
    assert adopted.returncode == 0, adopted.stderr
    assert fingerprint in adopted.stdout and "pinned" in adopted.stdout
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"
    assert f"[127.0.0.1]:{handle.port} ssh-ed25519" in pinned.read_text()

    status = await fleet_cli.run("--json", "status", "--hosts", "@adopted", "--timeout", "30s")
    assert status.returncode == 0, status.stderr
    hosts = {host["name"]: host for host in status.json()["hosts"]}
    assert hosts[instance]["state"] == "up"
    assert len(hosts[instance]["gpus"]) == 2
    listed = await fleet_cli.run("--json", "candidates")
    assert {h["name"]: h["state"] for h in listed.json()["hosts"]}[instance] == "adopted"
    again = await fleet_cli.run("--json", "status", "--hosts", "@adopted", "--timeout", "30s")
    assert instance in {host["name"] for host in again.json()["hosts"]}  # still adopted


def make_fleet(tmp_path: Path, options: SshOptions, inventory: Inventory | None = None) -> Fleet:
    empty = Inventory(hosts=(), path=None, groups={}, settings={}, settings_line=None)
    return Fleet(open_database(str(tmp_path / "fleet.db")), inventory or empty, options)


async def test_changed_key_and_spoofed_name_are_refused(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions, loopback_registry: LoopbackRegistry, token: str,
) -> None:
    changed = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "changed", 1)
    known = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "known", 1)
    spoof = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "spoof", 1)
    other_key = asyncssh.generate_private_key("ssh-ed25519")
    pinned = sim_ssh_options.pinned_hosts_file
    pinned.parent.mkdir(parents=True)
    pinned.write_text(known_hosts_line(LOOPBACK, changed.port, other_key) + "\n"
                      + known.known_hosts_line + "\n")
    inventory = Inventory(hosts=(known.spec,), path=None, groups={}, settings={},
                          settings_line=None)
    await asyncio.gather(
        announce_host(loopback_registry, changed, f"changed-{token}", "lab-a", 1),
        announce_host(loopback_registry, spoof, "known", "lab-a", 1))
    fleet = make_fleet(tmp_path, sim_ssh_options, inventory)
    try:
        await fleet.discover(timeout=2.0, interfaces=[LOOPBACK], session="lab-a")
        with pytest.raises(HostKeyRejected, match="HOST KEY CHANGED"):
            await fleet.adopt(f"changed-{token}", accept_new=True)
        with pytest.raises(HostKeyRejected, match="possible spoof"):
            await fleet.adopt("known", accept_new=True)  # the announced name
        assert [spec.name for spec in fleet.hosts()] == ["known"]
    finally:
        fleet.close()
    assert pinned.read_text().count("\n") == 2  # nothing new pinned


async def test_auto_adopt_takes_only_the_configured_session(
    tmp_path: Path, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools,
    sim_ssh_options: SshOptions, ssh_keys: SshKeys, loopback_registry: LoopbackRegistry,
    token: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "ours", 2)
    theirs = await start_gpu_host(sim_ssh_host, sim_tools, tmp_path, "theirs", 1)
    await asyncio.gather(
        # sessions of this test alone: other tests announce lab-a on the same loopback
        announce_host(loopback_registry, ours, f"ours-{token}", f"lab-a-{token}", 2),
        announce_host(loopback_registry, theirs, f"theirs-{token}", f"lab-b-{token}", 1))
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    shutil.copy(ssh_keys.private_path, tmp_path / "home" / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fleet = make_fleet(tmp_path, sim_ssh_options)
    policy = AutoAdoptPolicy.build(f"lab-a-{token}", ["127.0.0.0/8"])
    try:
        outcome = await fleet.discover(timeout=2.0, interfaces=[LOOPBACK], auto_adopt=policy)
        assert [result.name for result in outcome.adopted] == [f"ours-{token}"]
        assert outcome.adopted[0].auto and outcome.adopted[0].newly_pinned
        states = {view.name: view.state for view in outcome.views}
        assert states[f"ours-{token}"] == "adopted" and states[f"theirs-{token}"] == "new"
        assert [spec.name for spec in fleet.hosts()] == [f"ours-{token}"]
        statuses = await fleet.status(timeout=30)
        assert [(s.spec.name, s.state) for s in statuses] == [(f"ours-{token}", "up")]
        with fleet.database.session() as session:
            rows = {row.name: row.source for row in list_hosts(SessionReader(session))}
        assert rows == {f"ours-{token}": "adopted"}
        with fleet.database.session() as session:
            kinds = [event.kind for event in list_events(session)]
        assert "host_adopted" in kinds
    finally:
        fleet.close()
    assert f"[127.0.0.1]:{theirs.port}" not in sim_ssh_options.pinned_hosts_file.read_text()
