"""`GET /v1/watch`: the latest snapshot, then one server-sent `snapshot` event per change."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from fleet.server.keys import BROADCASTER, FLEET
from fleet.server.stream import sse_frame
from fleet.snapshot import FleetSnapshot
from fleet.wire.codec import encode
from fleet.wire.snapshot import snapshot_to_wire

log = logging.getLogger(__name__)

# A comment line this often keeps idle connections (and proxies) from timing out.
KEEPALIVE_S = 15.0
# How often an idle stream checks whether its client has gone.
CHECK_S = 0.5
# A client that cannot take one frame within this long is dropped too.
WRITE_TIMEOUT_S = 10.0


def snapshot_frame(snapshot: FleetSnapshot) -> bytes:
    """One snapshot as a server-sent `snapshot` event."""
    return sse_frame("snapshot", encode(snapshot_to_wire(snapshot)))


async def watch(request: web.Request) -> web.StreamResponse:
    """Stream snapshots until the client goes, falls behind, or the server stops."""
    broadcaster = request.app[BROADCASTER]
    transport = request.transport
    subscriber = broadcaster.subscribe(on_drop=transport.abort if transport else lambda: None)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    try:
        await response.prepare(request)
        current = request.app[FLEET].snapshot()
        if current is not None:
            await response.write(snapshot_frame(current))
        idle_s = 0.0
        while not subscriber.dropped and transport is not None and not transport.is_closing():
            try:
                async with asyncio.timeout(CHECK_S):
                    frame = await subscriber.queue.get()
            except TimeoutError:  # look at the connection, say something now and then
                idle_s += CHECK_S
                if idle_s < KEEPALIVE_S:
                    continue
                frame = b": keepalive\n\n"
            if frame is None:
                break
            idle_s = 0.0
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await response.write(frame)
    except (ConnectionError, TimeoutError) as exc:
        log.info("a /v1/watch client went away: %s", exc or type(exc).__name__)
    finally:
        broadcaster.unsubscribe(subscriber)
    return response
