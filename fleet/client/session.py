"""Open the service a command talks to: the selected server's RemoteFleet, else `fleet.open`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from fleet.client.remote import RemoteFleet
    from fleet.service import Fleet

Service: TypeAlias = "Fleet | RemoteFleet"


@asynccontextmanager
async def open_service(server: str | None, db: str | None, inventory: Path | None, *,
                       accept_new: bool = False) -> AsyncIterator[Service]:
    """RemoteFleet when a server is selected (fleet.client.select), else a local Fleet.

    The local path is exactly `fleet.open(db, inventory, accept_new=...)`; through a server,
    `db` and `inventory` are the server's business and are not used. For a server on a head
    node (ssh://), the RemoteFleet talks through an SSH tunnel (fleet.client.ssh_tunnel) and
    `accept_new` pins the head node's unknown host key; for a local socket it is not used.
    """
    from fleet.client.select import select_server

    choice = select_server(server)
    if choice is None:
        from fleet.service import open as open_fleet

        async with open_fleet(db, inventory, accept_new=accept_new) as local:
            yield local
        return
    from fleet.client.remote import open_remote

    if choice.head_node is None:
        async with open_remote(choice.socket_path) as remote:
            yield remote
        return
    from fleet.client.ssh_tunnel import open_tunnel
    from fleet.errors import ServerUnavailable

    url = choice.url or choice.head_node.host
    async with open_tunnel(choice.head_node, choice.socket_path, url,
                           accept_new=accept_new) as tunnel_socket, \
            open_remote(tunnel_socket) as remote:
        try:
            yield remote
        except ServerUnavailable as exc:  # it names the tunnel's local end: say where it leads
            raise ServerUnavailable(f"{url}, through the SSH tunnel: {exc}") from exc
