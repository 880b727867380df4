"""Running the async service from synchronous click commands."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeVar

from fleet.cli.context import GlobalOptions

if TYPE_CHECKING:
    from fleet.client.session import Service

T = TypeVar("T")


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """Run `main()` on a fresh event loop and return its result."""
    import asyncio  # deferred: costs ~40 ms, and `fleet --help` needs no event loop

    async def wrapper() -> T:
        return await main()

    return asyncio.run(wrapper())


def open_kwargs(options: GlobalOptions) -> dict[str, object]:
    """Keyword arguments for `fleet.service.open` from the global options."""
    return {"db": options.db_url, "inventory": options.inventory_path}


def open_service(options: GlobalOptions, *,
                 accept_new: bool = False) -> AbstractAsyncContextManager[Service]:
    """The service a command talks to: the selected `fleet serve` (--server, FLEET_SERVER,
    serve.socket, a server on the default socket) as a RemoteFleet, else `fleet.open` as
    always (fleet.client.session)."""
    from fleet.client.session import open_service as open_selected

    return open_selected(options.server, options.db_url, options.inventory_path,
                         accept_new=accept_new)
