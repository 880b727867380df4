"""An SSH tunnel to a head node's `fleet serve` socket, its host key checked like a GPU host's."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import asyncssh

from fleet.client.select import HeadNode
from fleet.errors import AuthFailed, HostKeyRejected, HostUnreachable, ServerUnavailable
from fleet.model import HostSpec
from fleet.ssh.connect import connect
from fleet.ssh.jump_spec import host_text_of
from fleet.ssh.options import SshOptions

# How long the head node may take to open a channel to the socket (the SSH login is bounded by
# SshOptions' connect and login timeouts).
SOCKET_OPEN_TIMEOUT_S = 10.0
LOCAL_SOCKET_NAME = "fleet.sock"


@asynccontextmanager
async def open_tunnel(
    head: HeadNode,
    remote_socket: Path,
    url: str,
    *,
    accept_new: bool = False,
    ssh_options: SshOptions | None = None,
) -> AsyncIterator[Path]:
    """A private local socket forwarded to `remote_socket` on `head`, for the block's duration.

    The SSH connection is fleet's own (fleet.ssh.connect): the host key is checked against
    ~/.ssh/known_hosts and fleet's pinned keys, an unknown key is pinned only with
    `accept_new`, a changed one always refused (HostKeyRejected, exit 3); ~/.ssh/config and the
    agent apply as for GPU hosts. A head node that cannot be reached or refuses the login, or
    where nothing listens on `remote_socket`, is ServerUnavailable (exit 9). The local socket
    lies in a fresh 0700 directory, so only this user can use the tunnel; the server sees the
    SSH login's user as its peer.
    """
    options = ssh_options or SshOptions()
    if accept_new:
        options = replace(options, accept_new=True)
    connection = await _login(head, url, options)
    try:
        await _check_socket(connection, head, remote_socket, url)
        with tempfile.TemporaryDirectory(prefix="fleet-ssh-", dir=_private_parent()) as scratch:
            local_socket = Path(scratch) / LOCAL_SOCKET_NAME
            try:
                listener = await connection.forward_local_path(
                    str(local_socket), str(remote_socket)
                )
            except OSError as exc:
                raise ServerUnavailable(
                    f"{url}: cannot listen on the local end of the tunnel "
                    f"{local_socket}: {exc.strerror or exc}"
                ) from exc
            try:
                yield local_socket
            finally:
                listener.close()
                await listener.wait_closed()
    finally:
        connection.close()
        await connection.wait_closed()


async def _login(head: HeadNode, url: str, options: SshOptions) -> asyncssh.SSHClientConnection:
    """The SSH connection to the head node; HostKeyRejected stays, other failures are exit 9."""
    spec = HostSpec(name=head.host, address=head.host, port=head.port, user=head.user, source=url)
    try:
        return await connect(spec, options)
    except HostKeyRejected as exc:
        raise HostKeyRejected(
            exc.host,
            f"{exc.detail} (head node of {url}; --accept-new is an "
            f"option of `fleet status`: fleet --server {url} status "
            "--accept-new)",
        ) from exc
    except (HostUnreachable, AuthFailed) as exc:
        where = host_text_of(head.user, head.host, head.port)
        raise ServerUnavailable(
            f"cannot reach the head node {where} of {url}: {exc.detail}"
        ) from exc


async def _check_socket(
    connection: asyncssh.SSHClientConnection, head: HeadNode, remote_socket: Path, url: str
) -> None:
    """Open and close one channel to the socket, so a missing server is named before use."""
    try:
        _reader, writer = await asyncio.wait_for(
            connection.open_unix_connection(str(remote_socket)), SOCKET_OPEN_TIMEOUT_S
        )
    except asyncssh.ChannelOpenError as exc:
        raise ServerUnavailable(
            f"{url}: no fleet serve answers at {remote_socket} on {head.host} (the SSH server "
            f"says: {exc.reason}); is it running there, and may this login open the "
            "socket?"
        ) from exc
    except (TimeoutError, asyncssh.Error, OSError) as exc:
        raise ServerUnavailable(
            f"{url}: cannot open {remote_socket} on {head.host}: {exc or type(exc).__name__}"
        ) from exc
    writer.close()


def _private_parent() -> str | None:
    """$XDG_RUNTIME_DIR when usable (short and per-user), else the default temp directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    return runtime if os.path.isabs(runtime) and os.path.isdir(runtime) else None
