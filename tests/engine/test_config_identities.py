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
from fleet.model import HostSpec
from fleet.ssh.connect import connect
from fleet.ssh.options import SshOptions
from tests.engine.test_client_keys import ssh_home  # noqa: F401 - fixture
from tests.engine.test_ssh_connect import (
    assert_logs_in,
    host_block,
    trust,
    trust_with_host_config,
)
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory, SshKeys


def _stranger_key(directory: Path) -> Path:
    """A private key the test hosts do not authorize."""
    path = directory / "id_stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    return path


def _aliased_host(tmp_path: Path, handle: SimHostHandle, identity_files: list[Path],
                  options: SshOptions) -> tuple[HostSpec, SshOptions]:
    """The host as the inventory loader resolves it when the inventory lists an alias that an
    ssh config maps to it with these IdentityFile lines in order, and options that use that
    config and trust the host."""
    config = tmp_path / "ssh_config"
    config.write_text(host_block(
        "gpu-alias", f"HostName {handle.spec.address}", f"Port {handle.port}",
        f"User {handle.spec.user}", *(f"IdentityFile {path}" for path in identity_files)))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu-alias: {}\n")
    (spec,) = load_inventory(inventory, ssh_config=config).hosts
    return spec, replace(trust(options, tmp_path, handle), ssh_config_files=(config,))


async def test_the_key_after_a_missing_and_a_refused_one_logs_in(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("aliased")
    spec, options = _aliased_host(tmp_path, handle, [
        tmp_path / "id_missing", _stranger_key(tmp_path), ssh_keys.private_path], sim_ssh_options)
    assert spec.identity_file is None
    assert spec.address == handle.spec.address and spec.port == handle.port
    assert spec.ssh_config_identity_files == (
        str(tmp_path / "id_missing"), str(tmp_path / "id_stranger"), str(ssh_keys.private_path))
    await assert_logs_in(spec, options)


@pytest.mark.parametrize(("names", "error"), [
    (["id_stranger"], "permission denied"),  # a key the host refuses
    (["id_gone", "id_lost"],
     r"no IdentityFile the ssh config names exists: \S*/id_gone, \S*/id_lost"),
])
async def test_keys_that_cannot_log_in_fail_with_what_went_wrong(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_home: Path, names: list[str], error: str,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("refused")
    _stranger_key(tmp_path)  # id_stranger exists; the other names do not
    spec, options = _aliased_host(
        tmp_path, handle, [tmp_path / name for name in names], sim_ssh_options)
    with pytest.raises(AuthFailed, match=error):
        await connect(spec, options)


async def test_an_address_the_config_names_skips_its_missing_keys(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("direct")
    options = trust_with_host_config(
        sim_ssh_options, tmp_path, handle, f"IdentityFile {tmp_path / 'id_missing'}",
        f"IdentityFile {ssh_keys.private_path}")
    await assert_logs_in(replace(handle.spec, identity_file=None), options)
