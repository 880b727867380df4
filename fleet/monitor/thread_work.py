"""Work in a worker thread that its caller's cancellation waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def finish_in_thread(
    func: Callable[..., T], *args: Any,
    settle: Callable[[asyncio.Future[T]], None] | None = None,
) -> T:
    """`func(*args)` in a worker thread. A thread cannot be stopped, so when the caller is
    cancelled this waits for the thread's end (a transaction committed or rolled back), hands
    the finished future to `settle` and only then re-raises the cancellation: whatever the
    caller does next (release a lock, close the database) comes after the work."""
    work = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        if settle is not None:
            settle(work)
        raise
