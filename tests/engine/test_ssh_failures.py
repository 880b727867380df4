"""Every way a connection fails becomes HostUnreachable / AuthFailed, fast and bounded."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from fleet.errors import AuthFailed, HostUnreachable
from fleet.model import HostSpec
from fleet.sim.sshhost import generate_keypair
from fleet.ssh.connect import connect
from fleet.ssh.options import SshOptions
from fleet.ssh.run import run_command
from tests.fixtures.sshserver import SimSshHostFactory


@pytest.fixture
def fast_options(sim_ssh_options: SshOptions) -> SshOptions:
    return replace(sim_ssh_options, connect_timeout=0.5, login_timeout=0.5)


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the keys a test names may be offered."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def silent_server() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never says a word."""
    writers: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    for writer in writers:
        writer.close()
    await asyncio.wait_for(server.wait_closed(), 5)


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A listening socket that never accepts, its backlog filled: new SYNs are dropped."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    for _ in range(4):
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        fillers.append(filler)
        filler.connect_ex(("127.0.0.1", port))  # non-blocking: EINPROGRESS or 0
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


async def test_refused_port_is_unreachable_fast(sim_ssh_options: SshOptions) -> None:
    port = free_port()
    spec = HostSpec(name="closed", address="127.0.0.1", port=port)
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match=rf"connection refused at 127\.0\.0\.1:{port}") as e:
        await connect(spec, sim_ssh_options)
    # Far below connect_timeout + login_timeout (4 s): a refusal is not waited out.
    assert time.monotonic() - started < 2.5
    assert isinstance(e.value.__cause__, ConnectionRefusedError)
    assert e.value.host == "closed"


async def test_silent_server_is_unreachable_within_timeouts(
    fast_options: SshOptions, silent_server: int
) -> None:
    spec = HostSpec(name="mute", address="127.0.0.1", port=silent_server)
    started = time.monotonic()
    with pytest.raises(HostUnreachable) as caught:
        await connect(spec, fast_options)
    elapsed = time.monotonic() - started
    assert elapsed < fast_options.handshake_deadline + 1.5
    assert f"no SSH login within 0.5s at 127.0.0.1:{silent_server}" in str(caught.value)
    assert caught.value.__cause__ is not None


async def test_black_holed_connect_is_unreachable_within_timeouts(
    fast_options: SshOptions, full_backlog: int
) -> None:
    spec = HostSpec(name="hole", address="127.0.0.1", port=full_backlog)
    started = time.monotonic()
    with pytest.raises(HostUnreachable) as caught:
        await connect(spec, fast_options)
    elapsed = time.monotonic() - started
    assert elapsed < fast_options.handshake_deadline + 1.5
    assert caught.value.host == "hole"
    assert f"timed out after 1s connecting to 127.0.0.1:{full_backlog}" in str(caught.value)


async def test_wrong_client_key_is_auth_failed(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("locked")
    stranger_key, _ = generate_keypair(tmp_path / "stranger")
    options = replace(sim_ssh_options, accept_new=True)
    with pytest.raises(AuthFailed) as caught:
        await connect(replace(handle.spec, identity_file=str(stranger_key)), options)
    message = str(caught.value)
    assert f"user {handle.spec.user}" in message
    assert "ssh-ed25519 SHA256:" in message  # which key was offered
    assert caught.value.host == "locked"


async def test_missing_identity_file_is_auth_failed(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("nokey")
    missing = tmp_path / "no-such-key"
    with pytest.raises(AuthFailed, match="no-such-key"):
        await connect(replace(handle.spec, identity_file=str(missing)), sim_ssh_options)


async def test_host_dying_mid_command_is_unreachable(
    sim_ssh_host: SimSshHostFactory, sim_ssh_options: SshOptions, tmp_path: Path
) -> None:
    handle = await sim_ssh_host("dies")
    options = replace(sim_ssh_options, accept_new=True)
    conn = await connect(handle.spec, options)
    command = asyncio.create_task(run_command(conn, "sleep 30", host="dies", timeout=10))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await handle.host.stop()
    with pytest.raises(HostUnreachable):
        await asyncio.wait_for(command, 5)
    assert time.monotonic() - started < 5
    conn.close()
