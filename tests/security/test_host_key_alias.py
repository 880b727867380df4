"""Host keys are looked up as `ssh ALIAS` looks them up: by the ssh config's HostKeyAlias, in
every known_hosts file OpenSSH reads for the host (UserKnownHostsFile, GlobalKnownHostsFile,
by default ~/.ssh/known_hosts{,2} and /etc/ssh/ssh_known_hosts{,2}). A key any of them records
as different for the host is CHANGED: refused, even with --accept-new, and nothing is pinned."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import asyncssh
import pytest

from fleet.errors import HostKeyRejected
from fleet.model import HostSpec
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.ssh.connect import connect
from fleet.ssh.hostkeys import key_fingerprint
from fleet.ssh.options import SshOptions
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory

ALIAS = "gammalias"


def _line(name: str, key: asyncssh.SSHKey) -> str:
    key_type, blob = key.export_public_key().decode().split()[:2]
    return f"{name} {key_type} {blob}\n"


def _old_key() -> asyncssh.SSHKey:
    """The key the operator recorded for the host (the "real" one): not what now answers."""
    return asyncssh.generate_private_key("ssh-ed25519")


def _aliased(handle: SimHostHandle, options: SshOptions, tmp_path: Path,
             *directives: str) -> tuple[HostSpec, SshOptions]:
    """The sim host as the inventory sees an ssh config alias (`ALIAS: {}`), and options whose
    ssh config maps ALIAS to it with these extra directives."""
    config = tmp_path / "ssh_config"
    lines = [f"Host {ALIAS}", "  HostName 127.0.0.1", f"  Port {handle.port}",
             *(f"  {directive}" for directive in directives)]
    config.write_text("\n".join(lines) + "\n")
    spec = replace(handle.spec, name=ALIAS, ssh_config_host=ALIAS)
    return spec, replace(options, ssh_config_files=(config,), accept_new=True)


async def _refused_as_changed(spec: HostSpec, options: SshOptions, handle: SimHostHandle,
                              old: asyncssh.SSHKey, recorded_in: Path) -> None:
    with pytest.raises(HostKeyRejected) as caught:
        await connect(spec, options)
    message = str(caught.value)
    assert caught.value.exit_code == 3
    assert "HOST KEY CHANGED" in message, message
    assert key_fingerprint(handle.host_key) in message and key_fingerprint(old) in message
    assert f"{recorded_in}:1" in message
    assert not options.pinned_hosts_file.exists()


async def test_host_key_alias_with_changed_key_is_refused_even_with_accept_new(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    old = _old_key()
    user_file = tmp_path / "known_hosts"
    user_file.write_text(_line(ALIAS, old))
    spec, options = _aliased(handle, replace(sim_ssh_options, known_hosts_files=(user_file,)),
                             tmp_path, f"HostKeyAlias {ALIAS}")
    await _refused_as_changed(spec, options, handle, old, user_file)


async def test_user_known_hosts_file_of_the_ssh_config_is_read(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    old = _old_key()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The second file's name uses %-tokens (%h: the HostName, %p: the port), as OpenSSH allows.
    recorded = elsewhere / f"kh-127.0.0.1-{handle.port}"
    recorded.write_text(_line(f"[127.0.0.1]:{handle.port}", old))
    spec, options = _aliased(handle, sim_ssh_options, tmp_path,
                             f"UserKnownHostsFile {elsewhere}/missing {elsewhere}/kh-%h-%p")
    await _refused_as_changed(spec, options, handle, old, recorded)


async def test_system_wide_known_hosts_file_is_read(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    # /etc/ssh/ssh_known_hosts by default; the tests cannot write /etc, so it is injected.
    handle = await sim_ssh_host("gamma")
    old = _old_key()
    system_file = tmp_path / "ssh_known_hosts"
    system_file.write_text(_line(f"[127.0.0.1]:{handle.port}", old))
    spec, options = _aliased(
        handle, replace(sim_ssh_options, global_known_hosts_files=(system_file,)), tmp_path)
    await _refused_as_changed(spec, options, handle, old, system_file)


async def test_global_known_hosts_file_of_the_ssh_config_is_read(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    old = _old_key()
    system_file = tmp_path / "global_known_hosts"
    system_file.write_text(_line(ALIAS, old))
    spec, options = _aliased(handle, sim_ssh_options, tmp_path, f"HostKeyAlias {ALIAS}",
                             f"GlobalKnownHostsFile {system_file}")
    await _refused_as_changed(spec, options, handle, old, system_file)


async def test_matching_key_under_the_alias_connects_and_pins_nothing(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    user_file = tmp_path / "known_hosts"
    user_file.write_text(_line(ALIAS, handle.host_key))
    spec, options = _aliased(handle, replace(sim_ssh_options, known_hosts_files=(user_file,)),
                             tmp_path, f"HostKeyAlias {ALIAS}")
    conn = await connect(spec, replace(options, accept_new=False))
    async with conn:
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
    assert not options.pinned_hosts_file.exists()


async def test_accept_new_pins_under_the_alias(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("gamma")
    spec, options = _aliased(handle, sim_ssh_options, tmp_path, f"HostKeyAlias {ALIAS}")
    conn = await connect(spec, options)
    conn.close()
    pinned = options.pinned_hosts_file.read_text().splitlines()
    assert len(pinned) == 1 and pinned[0].startswith(_line(ALIAS, handle.host_key).strip())
    # Pinned where `ssh ALIAS` would look: a plain connect now finds it.
    again = await connect(spec, replace(options, accept_new=False))
    again.close()


async def test_cli_status_refuses_changed_key_of_host_key_alias(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    gpus = fleet_cli.home / "gamma.gpus.conf"
    write_config(gpus, scenarios.idle(1, host="gamma"))
    handle = await sim_ssh_host("gamma", env=sim_tools.env(gpus))
    old = _old_key()
    ssh_dir = fleet_cli.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "known_hosts").write_text(_line(ALIAS, old))
    (ssh_dir / "config").write_text(
        f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {handle.port}\n  HostKeyAlias {ALIAS}\n"
        f"  User {handle.spec.user}\n  IdentityFile {handle.spec.identity_file}\n")
    (fleet_cli.home / "inventory.yaml").write_text(f"hosts:\n  {ALIAS}: {{}}\n")
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"

    result = await fleet_cli.run("--json", "status", "--accept-new", "--timeout", "30s")

    assert result.returncode == 3, result.stdout + result.stderr
    (host,) = result.json()["hosts"]
    assert host["state"] == "host_key_rejected"
    assert "HOST KEY CHANGED" in host["reason"]
    new_blob = _line(ALIAS, handle.host_key).split()[2]
    assert not pinned.exists() or new_blob not in pinned.read_text()
