"""`--server ssh://…` without root: the real CLI reaches a real `fleet serve` through asyncssh's
own SSH server on 127.0.0.1 (the cluster suite does the same through OpenSSH, as another user)."""

from __future__ import annotations

import getpass
import shutil
from collections.abc import AsyncIterator

import asyncssh
import pytest

from fleet.ssh.known_hosts import read_known_hosts
from tests.fixtures.sshserver import SshKeys
from tests.server.conftest import ServeLab, ServeLabFactory


class UnixForwardingServer(asyncssh.SSHServer):
    """Lets a logged-in client open channels to Unix sockets (what OpenSSH's sshd allows)."""

    def unix_connection_requested(self, dest_path: str) -> bool:
        return True


@pytest.fixture
async def head_node(ssh_keys: SshKeys) -> AsyncIterator[tuple[int, asyncssh.SSHKey]]:
    """An SSH server on 127.0.0.1 (port, host key) that accepts the session's client key."""
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_host_keys=[host_key],
        authorized_client_keys=str(ssh_keys.authorized_keys), server_factory=UnixForwardingServer)
    try:
        yield server.sockets[0].getsockname()[1], host_key
    finally:
        server.close()
        await server.wait_closed()


def _give_login_key(lab: ServeLab, ssh_keys: SshKeys) -> None:
    ssh_dir = lab.cli.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copy(ssh_keys.private_path, ssh_dir / "id_ed25519")
    (ssh_dir / "id_ed25519").chmod(0o600)


def _pinned_blobs(lab: ServeLab, port: int) -> list[bytes | None]:
    pinned = lab.cli.home / ".local" / "share" / "fleet" / "known_hosts"
    return [entry.key_blob for entry in read_known_hosts(pinned)
            if entry.hosts == f"[127.0.0.1]:{port}"]


@pytest.mark.slow
async def test_the_cli_goes_through_the_tunnel_after_pinning_the_head_node_key(
        serve_lab: ServeLabFactory, head_node: tuple[int, asyncssh.SSHKey],
        ssh_keys: SshKeys) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    _give_login_key(lab, ssh_keys)
    port, host_key = head_node
    url = f"ssh://{getpass.getuser()}@127.0.0.1:{port}{server.socket_path}"

    unknown = await lab.run("--server", url, "tasks")
    assert unknown.returncode == 3, unknown.stderr
    assert "unknown host key for 127.0.0.1" in unknown.stderr
    assert f"fleet --server {url} status --accept-new" in unknown.stderr
    assert _pinned_blobs(lab, port) == []

    status = await lab.run("--server", url, "--json", "status", "--accept-new")
    assert status.returncode == 0, status.stderr
    assert [host["name"] for host in status.json()["hosts"]] == ["gpu1"]
    assert _pinned_blobs(lab, port) == [host_key.public_data]

    tasks = await lab.run("--json", "tasks", env={"FLEET_SERVER": url})
    assert tasks.returncode == 0, tasks.stderr
    assert tasks.json() == {"tasks": []}

    missing = await lab.run("--server", f"ssh://127.0.0.1:{port}/nonexistent/fleet.sock",
                            "tasks")
    assert missing.returncode == 9, missing.stderr
    assert "no fleet serve answers at /nonexistent/fleet.sock on 127.0.0.1" in missing.stderr

    await server.stop()
    gone = await lab.run("--server", url, "tasks")
    assert gone.returncode == 9, gone.stderr
    assert f"no fleet serve answers at {server.socket_path}" in gone.stderr
