"""Running the async service from synchronous click commands."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from fleet.cli.context import GlobalOptions

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
