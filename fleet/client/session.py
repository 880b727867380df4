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
    `db`, `inventory` and `accept_new` are the server's business and are not used.
    """
    from fleet.client.select import select_server

    choice = select_server(server)
    if choice is None:
        from fleet.service import open as open_fleet

        async with open_fleet(db, inventory, accept_new=accept_new) as local:
            yield local
        return
    from fleet.client.remote import open_remote

    async with open_remote(choice.socket_path) as remote:
        yield remote
