"""Writing a queue of server-sent-event frames to one client, until it ends or the client goes;
EventStream pairs such a queue with the work that fills it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from fleet.server.stream import sse_frame

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


class EventStream:
    """One client's events from work that runs beside its response (a task's log, followed).

    `emit` queues an event; a client that falls the queue's size behind is let go (`stop` is
    set, which the work should watch). `serve` runs the work, relays its frames, and stops it
    when the client goes.
    """

    def __init__(self, size: int) -> None:
        self.frames: asyncio.Queue[bytes | None] = asyncio.Queue(size)
        self.stop = asyncio.Event()

    def emit(self, event: str, data: bytes) -> None:
        """Queue one event (its encoded data)."""
        try:
            self.frames.put_nowait(sse_frame(event, data))
        except asyncio.QueueFull:
            self.stop.set()

    async def serve(self, request: web.Request, work: Coroutine[Any, Any, None], *, name: str,
                    stop_timeout_s: float) -> web.StreamResponse:
        """Run `work` beside an event-stream response until both are done (the work waited
        for at most `stop_timeout_s` once the client went)."""
        async def run() -> None:
            try:
                await work
            finally:
                try:
                    self.frames.put_nowait(None)
                except asyncio.QueueFull:
                    self.stop.set()

        follower = asyncio.create_task(run(), name=name)
        response = web.StreamResponse(headers=EVENT_STREAM_HEADERS)
        try:
            await response.prepare(request)
            await relay(request, response, self.frames, dropped=self.stop.is_set)
        finally:
            self.stop.set()
            await asyncio.wait({follower}, timeout=stop_timeout_s)
        return response
