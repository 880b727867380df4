"""Stopping long commands on SIGINT/SIGTERM: one async context manager that yields an Event."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@asynccontextmanager
async def stop_on_signals(
    on_signal: Callable[[int], None] | None = None,
) -> AsyncIterator[asyncio.Event]:
    """An Event set by the first SIGINT/SIGTERM while the block runs; handlers removed after.

    `on_signal(count)` is called for every signal received (1 for the first), after the event
    is set, so a command can say what it does on the first Ctrl-C and on the ones after.
    """
    import asyncio  # deferred: `fleet --help` needs no event loop

    stop = asyncio.Event()
    received = 0

    def handle() -> None:
        nonlocal received
        received += 1
        stop.set()
        if on_signal is not None:
            on_signal(received)

    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, handle)
    try:
        yield stop
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
