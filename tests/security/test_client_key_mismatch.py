"""A client key pair whose .pub is not the public half of its private key is the controller's
configuration error (exit 2, both files named), never a host "down"; fetching a host key
(adopt: no login) loads no client key at all."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import asyncssh
import pytest

from fleet.errors import ConfigError
from fleet.sim import gpus as scenarios
from fleet.sim.build import SimTools
from fleet.sim.gpus import write_config
from fleet.ssh.connect import connect, fetch_host_key
from fleet.ssh.hostkeys import key_fingerprint
from fleet.ssh.options import SshOptions
from tests.fixtures.cli import FleetCli
from tests.fixtures.sshserver import SimSshHostFactory


def _stale_pair(directory: Path, private: Path) -> tuple[Path, Path]:
    """A copy of `private` as directory/id_ed25519 with an id_ed25519.pub of another key."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = directory / "id_ed25519"
    shutil.copyfile(private, key)
    key.chmod(0o600)
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key()
    (directory / "id_ed25519.pub").write_bytes(other)
    return key, directory / "id_ed25519.pub"


async def test_identity_file_with_stale_pub_is_a_config_error_naming_both_files(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("alpha")
    assert handle.spec.identity_file is not None
    key, public = _stale_pair(tmp_path / "keys", Path(handle.spec.identity_file))
    with pytest.raises(ConfigError) as caught:
        await connect(replace(handle.spec, identity_file=str(key)),
                      replace(sim_ssh_options, accept_new=True))
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert str(public) in message and str(key) in message and "mismatch" in message


async def test_fetch_host_key_loads_no_client_key(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handle = await sim_ssh_host("beta")
    assert handle.spec.identity_file is not None
    home = tmp_path / "home"
    _stale_pair(home / ".ssh", Path(handle.spec.identity_file))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    key_type, fingerprint = await fetch_host_key(
        replace(handle.spec, identity_file=None), sim_ssh_options)
    assert (key_type, fingerprint) == ("ssh-ed25519", key_fingerprint(handle.host_key))


async def test_cli_status_with_stale_default_pub_exits_2_and_records_no_host_down(
    fleet_cli: FleetCli, sim_ssh_host: SimSshHostFactory, sim_tools: SimTools
) -> None:
    gpus = fleet_cli.home / "alpha.gpus.conf"
    write_config(gpus, scenarios.idle(1, host="alpha"))
    handle = await sim_ssh_host("alpha", env=sim_tools.env(gpus))
    assert handle.spec.identity_file is not None
    _, public = _stale_pair(fleet_cli.home / ".ssh", Path(handle.spec.identity_file))
    (fleet_cli.home / "inventory.yaml").write_text(
        f"hosts:\n  alpha:\n    address: 127.0.0.1\n    port: {handle.port}\n"
        f"    user: {handle.spec.user}\n")

    result = await fleet_cli.run("status", "--accept-new", "--timeout", "30s")
    assert result.returncode == 2, result.stdout + result.stderr
    assert str(public) in result.stderr and "mismatch" in result.stderr

    hosts = await fleet_cli.run("--json", "hosts")
    assert hosts.returncode == 0, hosts.stderr
    assert all(host.get("state") in (None, "unknown") for host in hosts.json()["hosts"]), \
        hosts.stdout
