"""Writing a queue of server-sent-event frames to one client, until it ends or the client goes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)

# A comment line this often keeps idle connections (and proxies) from timing out.
KEEPALIVE_S = 15.0
# How often an idle stream checks whether its client has gone.
CHECK_S = 0.5
# A client that cannot take one frame within this long is dropped too.
WRITE_TIMEOUT_S = 10.0
EVENT_STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-store"}


async def relay(request: web.Request, response: web.StreamResponse,
                frames: asyncio.Queue[bytes | None], *,
                dropped: Callable[[], bool] = lambda: False) -> bool:
    """Write `frames` to the prepared `response` until a None frame (True) or until the client
    goes, stalls WRITE_TIMEOUT_S on one frame, or is `dropped()` (False)."""
    transport = request.transport
    idle_s = 0.0
    try:
        while not dropped() and transport is not None and not transport.is_closing():
            try:
                async with asyncio.timeout(CHECK_S):
                    frame = await frames.get()
            except TimeoutError:  # look at the connection, say something now and then
                idle_s += CHECK_S
                if idle_s < KEEPALIVE_S:
                    continue
                frame = b": keepalive\n\n"
            if frame is None:
                return True
            idle_s = 0.0
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await response.write(frame)
    except (ConnectionError, TimeoutError) as exc:
        log.info("a client of %s went away: %s", request.path, exc or type(exc).__name__)
    return False
