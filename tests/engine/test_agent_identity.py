"""A passphrase-protected identity file is left to the ssh-agent that holds its key, as OpenSSH
does; where no agent runs, or the agent lacks the key, the error says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import asyncssh
import pytest

from fleet.errors import AuthFailed
from fleet.ssh.connect import connect
from fleet.ssh.options import SshOptions
from tests.engine.test_ssh_connect import assert_logs_in, trust
from tests.fixtures.sshserver import SimSshHostFactory, SshKeys

pytestmark = pytest.mark.skipif(shutil.which("ssh-agent") is None,
                                reason="OpenSSH's ssh-agent is not installed (openssh-client)")


@pytest.fixture
def agent_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real ssh-agent of this test's own (SSH_AUTH_SOCK points at it), stopped by PID."""
    socket = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not socket.exists():
            if time.monotonic() > deadline or agent.poll() is not None:
                raise RuntimeError("ssh-agent did not open its socket")
            time.sleep(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        yield socket
    finally:
        agent.terminate()
        agent.wait(timeout=10)


@pytest.fixture
def locked_identity(tmp_path: Path, ssh_keys: SshKeys) -> Path:
    """The session's client key, written passphrase-protected (PKCS#8: no bcrypt needed)."""
    path = tmp_path / "id_locked"
    asyncssh.read_private_key(str(ssh_keys.private_path)).write_private_key(
        str(path), format_name="pkcs8-pem", passphrase="not given to fleet")
    return path


def add_to_agent(key: Path, socket: Path) -> None:
    """`ssh-add KEY` to the agent at `socket`."""
    subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(socket)},
                   check=True, timeout=30, capture_output=True)


async def test_the_agent_signs_for_a_passphrase_protected_identity(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    ssh_keys: SshKeys, agent_socket: Path, locked_identity: Path,
) -> None:
    add_to_agent(ssh_keys.private_path, agent_socket)
    handle = await sim_ssh_host("locked")
    spec = replace(handle.spec, identity_file=str(locked_identity))
    await assert_logs_in(spec, trust(sim_ssh_options, tmp_path, handle))


async def test_an_agent_without_the_key_is_named_in_the_error(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    agent_socket: Path, locked_identity: Path,
) -> None:
    handle = await sim_ssh_host("locked-empty-agent")
    spec = replace(handle.spec, identity_file=str(locked_identity))
    with pytest.raises(AuthFailed, match=r"permission denied .* is passphrase-protected: is it "
                                         r"in the ssh-agent \(`ssh-add -l`\)\?"):
        await connect(spec, trust(sim_ssh_options, tmp_path, handle))


async def test_without_an_agent_the_error_says_how_to_load_the_key(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path,
    locked_identity: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    handle = await sim_ssh_host("locked-no-agent")
    spec = replace(handle.spec, identity_file=str(locked_identity))
    with pytest.raises(AuthFailed, match=f"identity {locked_identity} is passphrase-protected "
                                         f"and no ssh-agent runs here.*ssh-add {locked_identity}"):
        await connect(spec, trust(sim_ssh_options, tmp_path, handle))
