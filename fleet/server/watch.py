"""`GET /v1/watch`: the latest snapshot, then one server-sent `snapshot` event per change."""

from __future__ import annotations

import logging

from aiohttp import web

from fleet.server.keys import BROADCASTER, FLEET
from fleet.server.relay import EVENT_STREAM_HEADERS, relay
from fleet.server.stream import sse_frame
from fleet.snapshot import FleetSnapshot
from fleet.wire.codec import encode
from fleet.wire.snapshot import snapshot_to_wire

log = logging.getLogger(__name__)


def snapshot_frame(snapshot: FleetSnapshot) -> bytes:
    """One snapshot as a server-sent `snapshot` event."""
    return sse_frame("snapshot", encode(snapshot_to_wire(snapshot)))


async def watch(request: web.Request) -> web.StreamResponse:
    """Stream snapshots until the client goes, falls behind, or the server stops."""
    broadcaster = request.app[BROADCASTER]
    transport = request.transport
    subscriber = broadcaster.subscribe(on_drop=transport.abort if transport else lambda: None)
    response = web.StreamResponse(headers=EVENT_STREAM_HEADERS)
    try:
        await response.prepare(request)
        current = request.app[FLEET].snapshot()
        if current is not None:
            await response.write(snapshot_frame(current))
        await relay(request, response, subscriber.queue, dropped=lambda: subscriber.dropped)
    except ConnectionError as exc:
        log.info("a /v1/watch client went away: %s", exc or type(exc).__name__)
    finally:
        broadcaster.unsubscribe(subscriber)
    return response
