"""Every IdentityFile an ssh config names for a host is offered, in order, missing ones skipped,
as OpenSSH does: for a host the inventory resolves through the config by its alias, and for an
address the config names directly."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import asyncssh
import pytest

from fleet.errors import AuthFailed
from fleet.inventory import load_inventory
from fleet.ssh.connect import connect
from fleet.ssh.options import SshOptions
from tests.engine.test_client_keys import ssh_home  # noqa: F401 - fixture
from tests.engine.test_ssh_connect import trust
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory, SshKeys


def _stranger_key(directory: Path) -> Path:
    """A private key the test hosts do not authorize."""
    path = directory / "id_stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    return path


def _aliased_host(tmp_path: Path, handle: SimHostHandle, identity_files: list[Path]) -> Path:
    """An ssh config naming the host by an alias, with these IdentityFile lines in order, and
    an inventory listing the alias; returns the inventory."""
    config = tmp_path / "ssh_config"
    lines = [f"Host gpu-alias\n  HostName {handle.spec.address}\n  Port {handle.port}\n"
             f"  User {handle.spec.user}\n"]
    lines += [f"  IdentityFile {path}\n" for path in identity_files]
    config.write_text("".join(lines))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu-alias: {}\n")
    return inventory


async def test_the_key_after_a_missing_and_a_refused_one_logs_in(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("aliased")
    inventory = _aliased_host(tmp_path, handle, [
        tmp_path / "id_missing", _stranger_key(tmp_path), ssh_keys.private_path])
    (spec,) = load_inventory(inventory, ssh_config=tmp_path / "ssh_config").hosts
    assert spec.identity_file is None
    assert spec.address == handle.spec.address and spec.port == handle.port
    assert spec.ssh_config_identity_files == (
        str(tmp_path / "id_missing"), str(tmp_path / "id_stranger"), str(ssh_keys.private_path))
    options = replace(trust(sim_ssh_options, tmp_path, handle),
                      ssh_config_files=(tmp_path / "ssh_config",))
    conn = await connect(spec, options)
    try:
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
    finally:
        conn.close()


async def test_only_refused_keys_fail_naming_what_was_offered(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("refused")
    inventory = _aliased_host(tmp_path, handle, [_stranger_key(tmp_path)])
    (spec,) = load_inventory(inventory, ssh_config=tmp_path / "ssh_config").hosts
    options = replace(trust(sim_ssh_options, tmp_path, handle),
                      ssh_config_files=(tmp_path / "ssh_config",))
    with pytest.raises(AuthFailed, match="permission denied"):
        await connect(spec, options)


async def test_a_config_naming_only_missing_files_fails_naming_them(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("missing")
    inventory = _aliased_host(tmp_path, handle, [tmp_path / "id_gone", tmp_path / "id_lost"])
    (spec,) = load_inventory(inventory, ssh_config=tmp_path / "ssh_config").hosts
    options = replace(trust(sim_ssh_options, tmp_path, handle),
                      ssh_config_files=(tmp_path / "ssh_config",))
    with pytest.raises(AuthFailed, match=r"no IdentityFile the ssh config names exists: "
                                         r"\S*/id_gone, \S*/id_lost"):
        await connect(spec, options)


async def test_an_address_the_config_names_skips_its_missing_keys(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("direct")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host {handle.spec.address}\n  IdentityFile {tmp_path / 'id_missing'}\n"
                      f"  IdentityFile {ssh_keys.private_path}\n")
    options = replace(trust(sim_ssh_options, tmp_path, handle), ssh_config_files=(config,))
    conn = await connect(replace(handle.spec, identity_file=None), options)
    try:
        assert (await conn.run("echo hi", check=True)).stdout == b"hi\n"
    finally:
        conn.close()
