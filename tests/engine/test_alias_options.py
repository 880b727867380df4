"""Options set only in the Host block of an ssh config alias apply to the host the inventory
resolved through that alias, as with `ssh ALIAS` (IdentityAgent, IdentitiesOnly); a config that
no longer maps the alias to the host's address leaves the address dialled."""

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
from tests.engine.test_agent_identity import add_to_agent, agent_socket  # noqa: F401 - fixture
from tests.engine.test_client_keys import ssh_home  # noqa: F401 - fixture
from tests.engine.test_ssh_connect import assert_logs_in, host_block, trust
from tests.fixtures.sshserver import SimHostHandle, SimSshHostFactory, SshKeys

ALIAS = "gpu-alias"


def _alias_block(handle: SimHostHandle, *directives: str) -> str:
    """`Host gpu-alias` mapping the alias to the sim host, with these directives too."""
    return host_block(ALIAS, f"HostName {handle.spec.address}", f"Port {handle.port}",
                      f"User {handle.spec.user}", *directives)


def _resolved(tmp_path: Path, config_text: str) -> tuple[HostSpec, Path]:
    """The inventory's one host, `gpu-alias`, as the loader resolves it through an ssh config
    holding `config_text`, and that config's path."""
    config = tmp_path / "ssh_config"
    config.write_text(config_text)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  {ALIAS}: {{}}\n")
    (spec,) = load_inventory(inventory, ssh_config=config).hosts
    return spec, config


async def test_an_identity_agent_the_alias_names_signs_for_it(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path, agent_socket: Path,  # noqa: F811 - fixtures
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_to_agent(ssh_keys.private_path, agent_socket)
    monkeypatch.delenv("SSH_AUTH_SOCK")  # the alias's IdentityAgent is the only way in
    handle = await sim_ssh_host("agent-alias")
    spec, config = _resolved(tmp_path, _alias_block(handle, f"IdentityAgent {agent_socket}"))
    assert (spec.address, spec.ssh_config_host) == (handle.spec.address, ALIAS)
    assert spec.identity_file is None and not spec.ssh_config_identity_files
    await assert_logs_in(spec, replace(trust(sim_ssh_options, tmp_path, handle),
                                       ssh_config_files=(config,)))


async def test_identities_only_in_the_alias_keeps_the_agents_keys_back(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path, agent_socket: Path,  # noqa: F811 - fixtures
) -> None:
    add_to_agent(ssh_keys.private_path, agent_socket)  # the one key the host accepts
    stranger = tmp_path / "id_stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    handle = await sim_ssh_host("identities-only")
    spec, config = _resolved(tmp_path, _alias_block(
        handle, f"IdentityFile {stranger}", "IdentitiesOnly yes"))
    options = replace(trust(sim_ssh_options, tmp_path, handle), ssh_config_files=(config,))
    # As OpenSSH: only the named file is offered, not the agent's other keys.
    with pytest.raises(AuthFailed, match="permission denied"):
        await connect(spec, options)
    without = config.read_text().replace("  IdentitiesOnly yes\n", "")
    config.write_text(without)
    await assert_logs_in(spec, options)  # the agent's key, offered once the option is gone


async def test_a_config_that_maps_the_alias_elsewhere_leaves_the_address_dialled(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, ssh_home: Path,  # noqa: F811 - fixture
) -> None:
    handle = await sim_ssh_host("moved-alias")
    spec, _ = _resolved(tmp_path, _alias_block(handle, f"IdentityFile {ssh_keys.private_path}"))
    elsewhere = tmp_path / "edited_ssh_config"  # the alias now names a port nothing listens on
    elsewhere.write_text(host_block(ALIAS, "HostName 127.0.0.2", "Port 9"))
    await assert_logs_in(spec, replace(trust(sim_ssh_options, tmp_path, handle),
                                       ssh_config_files=(elsewhere,)))
