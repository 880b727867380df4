"""`fleet --server ssh://user@head/socket`: the real CLI reaches a `fleet serve` on a namespace host
through its OpenSSH sshd, as the SSH login's user, with fleet's host-key rules."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleet.client.remote import open_remote
from fleet.errors import FleetError
from fleet.ssh.known_hosts import read_known_hosts
from tests.cli.conftest import FleetCli
from tests.cluster.hosts import ClusterHostSpec, NetnsHost
from tests.cluster.netcluster import Cluster
from tests.fixtures.cluster import ClusterFactory
from tests.server.users import UnixUser, unique_group, unix_users

ROOT = Path(__file__).resolve().parents[2]
# Paths as the head node's processes see them: its /tmp and /root are its own (tests.cluster.sshd).
SERVE_SOCKET = Path("/tmp/fleet-serve/fleet.sock")
LOGIN_KEYS = Path("/tmp/fleet-login-keys/authorized_keys")
SERVE_START_DEADLINE_S = 30.0
SERVE_STOP_DEADLINE_S = 15.0
# One call of the public API through `open_service`: the CLI has no `whoami` command.
WHOAMI_SCRIPT = """
import asyncio, json, sys
from fleet.client.session import open_service

async def main():
    async with open_service(sys.argv[1], None, None) as service:
        me = await service.whoami()
    print(json.dumps({"user": me.user, "uid": me.uid, "server_pid": me.server_pid}))

asyncio.run(main())
"""


@dataclass
class HeadNodeServer:
    """A `fleet serve` running on a namespace host, started and stopped by its recorded pid."""

    host: NetnsHost
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def socket_outside(self) -> Path:
        return _socket_outside(self.host)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=SERVE_STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=SERVE_STOP_DEADLINE_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def remote_user() -> Iterator[tuple[UnixUser, str]]:
    """A real Unix user (not root) in a fresh group; removed afterwards. Root only."""
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and real Unix users")
    group = unique_group("flr")
    with unix_users(1, [[group]]) as users:
        # useradd leaves the password field "!": sshd (without PAM) refuses a locked account
        # even for key logins; "*" is "no password", which key logins accept.
        subprocess.run(["usermod", "-p", "*", users[0].name], check=True, capture_output=True,
                       timeout=30)
        yield users[0], group


def _socket_outside(host: NetnsHost) -> Path:
    """The server's socket (SERVE_SOCKET on the head node) as the test's mount namespace sees it."""
    return host.tmp_dir / SERVE_SOCKET.relative_to("/tmp")


def _let_users_log_in(lab: Cluster, host: NetnsHost) -> None:
    """sshd reads authorized keys as the login user: give it a copy it can read, restart sshd.

    The cluster's own authorized_keys lies in its 0700 run directory, readable by root only.
    """
    keys_outside = host.tmp_dir / LOGIN_KEYS.relative_to("/tmp")
    keys_outside.parent.mkdir(mode=0o755)
    shutil.copy(lab.run_dir / "authorized_keys", keys_outside)
    keys_outside.chmod(0o644)
    config = host.sshd_config.read_text().splitlines()
    config = [f"AuthorizedKeysFile {LOGIN_KEYS}" if line.startswith("AuthorizedKeysFile ")
              else line for line in config]
    host.sshd_config.write_text("\n".join(config) + "\n")
    host.kill_sshd()
    host.start_sshd()


async def _start_server(host: NetnsHost, group: str) -> HeadNodeServer:
    """`fleet serve` in the head node's network and UTS namespaces (those of its sshd).

    It keeps this machine's mount namespace (the venv's Python lives under the real /root), so
    it listens on the head node's /tmp by that directory's path here.
    """
    assert host.sshd_record is not None
    log_path = host.host_dir / "serve.log"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FLEET_", "XDG_", "SSH_"))}
    env.update({"HOME": str(host.home_dir), "PYTHONPATH": str(ROOT)})
    argv = ["nsenter", f"--target={host.sshd_record.pid}", "--net", "--uts", "--",
            sys.executable, "-m", "fleet.cli.main", "--db", str(host.home_dir / "fleet.db"),
            "serve", "--socket", str(_socket_outside(host)), "--group", group]
    with open(log_path, "wb") as log_file:
        # nsenter without --pid execs the program: the recorded pid is the server's own.
        process = subprocess.Popen(argv, cwd=host.home_dir, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log_file, stderr=log_file)
    server = HeadNodeServer(host, process, log_path)
    try:
        await _wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


async def _wait_ready(server: HeadNodeServer) -> None:
    deadline = time.monotonic() + SERVE_START_DEADLINE_S
    last: object = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"fleet serve exited {server.process.returncode}: "
                                 f"{server.log()}")
        if server.socket_outside.exists():
            try:
                async with open_remote(server.socket_outside) as remote:
                    me = await remote.whoami()
                assert me.server_pid == server.process.pid
                return
            except FleetError as exc:
                last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"fleet serve not ready in {SERVE_START_DEADLINE_S}s: {last}; "
                         f"{server.log()}")


@pytest.fixture
async def head_node(netns_cluster: ClusterFactory, remote_user: tuple[UnixUser, str],
                    fleet_cli: FleetCli) -> AsyncIterator[tuple[Cluster, HeadNodeServer]]:
    """One namespace host `head` running `fleet serve`; the CLI's home has the login key."""
    _user, group = remote_user
    lab = await netns_cluster([ClusterHostSpec("head")])
    assert isinstance(lab, Cluster)
    host = lab.host("head")
    _let_users_log_in(lab, host)
    ssh_dir = fleet_cli.home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    shutil.copy(lab.client_key, ssh_dir / "id_ed25519")  # a default key: no ssh config needed
    (ssh_dir / "id_ed25519").chmod(0o600)
    server = await _start_server(host, group)
    try:
        yield lab, server
    finally:
        server.stop()


def _url(user: UnixUser, host: NetnsHost, *, port: int = 22,
         socket_path: Path = SERVE_SOCKET) -> str:
    return f"ssh://{user.name}@{host.address}:{port}{socket_path}"


def _pinned_keys(fleet_cli: FleetCli) -> list[bytes | None]:
    pinned = fleet_cli.home / ".local" / "share" / "fleet" / "known_hosts"
    return [entry.key_blob for entry in read_known_hosts(pinned)]


def _key_blob(known_hosts_line: str) -> bytes:
    import base64

    return base64.b64decode(known_hosts_line.split()[2])


@pytest.mark.slow
async def test_remote_user_reaches_the_head_node_server_as_their_ssh_login(
    head_node: tuple[Cluster, HeadNodeServer], remote_user: tuple[UnixUser, str],
    fleet_cli: FleetCli,
) -> None:
    lab, server = head_node
    user, _group = remote_user
    host = lab.host("head")
    url = _url(user, host)

    unknown = await fleet_cli.run("--server", url, "tasks")
    assert unknown.returncode == 3, unknown.stderr  # HostKeyRejected, as for a GPU host
    assert "unknown host key" in unknown.stderr and "--accept-new" in unknown.stderr
    assert host.address in unknown.stderr
    assert _pinned_keys(fleet_cli) == []

    pinned = await fleet_cli.run("--server", url, "--json", "status", "--accept-new")
    assert pinned.returncode == 0, pinned.stderr
    assert _pinned_keys(fleet_cli) == [_key_blob(host.known_hosts_line)]

    listed = await fleet_cli.run("--json", "tasks", env={"FLEET_SERVER": url})  # no --accept-new
    assert listed.returncode == 0, listed.stderr
    assert listed.json() == {"tasks": []}

    whoami = await _run_script(fleet_cli, WHOAMI_SCRIPT, url)
    assert whoami == {"user": user.name, "uid": user.uid, "server_pid": server.process.pid}


async def _run_script(fleet_cli: FleetCli, script: str, *args: str) -> object:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, cwd=fleet_cli.home, env=fleet_cli.env(),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout)


@pytest.mark.slow
async def test_unreachable_head_node_missing_server_and_changed_key_are_refused(
    head_node: tuple[Cluster, HeadNodeServer], remote_user: tuple[UnixUser, str],
    fleet_cli: FleetCli,
) -> None:
    lab, _server = head_node
    user, _group = remote_user
    host = lab.host("head")
    known_hosts = fleet_cli.home / ".ssh" / "known_hosts"
    known_hosts.write_text(host.known_hosts_line + "\n")  # trusted as OpenSSH would have it

    closed_port = await fleet_cli.run("--server", _url(user, host, port=2222), "tasks")
    assert closed_port.returncode == 9, closed_port.stderr
    assert f"head node {user.name}@{host.address}:2222" in closed_port.stderr
    assert "connection refused" in closed_port.stderr

    no_server = await fleet_cli.run(
        "--server", _url(user, host, socket_path=Path("/tmp/fleet-serve/none.sock")), "tasks")
    assert no_server.returncode == 9, no_server.stderr
    assert "no fleet serve answers at /tmp/fleet-serve/none.sock" in no_server.stderr

    bad_url = await fleet_cli.run("tasks", env={"FLEET_SERVER": f"ssh://{host.address}:0"})
    assert bad_url.returncode == 2, bad_url.stderr
    assert "FLEET_SERVER" in bad_url.stderr and "port" in bad_url.stderr

    host.rotate_host_key()  # known_hosts keeps the old key
    changed = await fleet_cli.run("--server", _url(user, host), "status", "--accept-new")
    assert changed.returncode == 3, changed.stderr
    assert "HOST KEY CHANGED" in changed.stderr
    assert _pinned_keys(fleet_cli) == []  # a changed key is never pinned
