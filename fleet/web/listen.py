"""`--web`'s TCP listener, which answers 503 and closes beyond a cap on open connections.

Every connection holds a file descriptor until aiohttp's deadlines (fleet.server.app
IDLE_TIMEOUT_S) close it; without a cap, clients that open connections and send nothing can
use up the process's descriptors before any token is checked, and the Unix socket's API stops
answering with them. The cap keeps the rest for the API.

    listener = await listen_capped(runner.server, host, port)
    ...
    listener.close()            # stop accepting; then runner.cleanup() closes the connections
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 256
BACKLOG = 128
BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
              b"Content-Length: 26\r\nConnection: close\r\nRetry-After: 5\r\n\r\n"
              b"too many open connections\n")


class _Busy(asyncio.Protocol):
    """A connection over the cap: one 503, then closed, whatever it sends."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(BUSY_REPLY)
        transport.close()


class _Capped:
    """The protocol factory: aiohttp's while under `limit` open connections, else _Busy.

    The refusals are logged once per burst: when the cap is first reached, and again only
    after the connections fell below it.
    """

    def __init__(self, server: web.Server, limit: int) -> None:
        self.server = server
        self.limit = limit
        self.full = False

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) < self.limit:
            self.full = False
            return self.server()
        if not self.full:
            log.warning("web: %d connections open, refusing more until some close",
                        self.limit)
            self.full = True
        return _Busy()


async def listen_capped(server: web.Server, host: str, port: int, *,
                        max_connections: int | None = None) -> asyncio.Server:
    """Serve `server` (an AppRunner's) on host:port, at most `max_connections` (by default
    MAX_CONNECTIONS) at once. OSError when the address cannot be bound.
    """
    limit = MAX_CONNECTIONS if max_connections is None else max_connections
    loop = asyncio.get_running_loop()
    return await loop.create_server(_Capped(server, limit), host, port, backlog=BACKLOG)
