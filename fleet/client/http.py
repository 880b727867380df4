"""One HTTP/1.1 request and its reply on a fresh Unix-socket connection, framed by h11.

The CLI's client side of `fleet serve`: h11 (pure Python, well kept, a few ms to import) does
the HTTP/1.1 framing, chunked bodies included, over plain asyncio streams, so a client process
does not pay aiohttp's ~0.2 s import for one request. Each exchange opens its own connection
and asks the server to close it after the reply (`Connection: close`): on a Unix socket a
connection costs microseconds, and a stream being read never blocks another request.

Failures of the socket are OSError (as asyncio raises them); a reply that breaks HTTP/1.1 or
ends early (the server went away mid-body) is ExchangeError. Deadlines are the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import h11

READ_CHUNK = 1 << 16
# HTTP/1.1 requires a Host header; on a Unix socket the server ignores its value.
HOST = "fleet"


class ExchangeError(Exception):
    """The reply is not HTTP/1.1, or the connection closed before its end."""


class Exchange:
    """One connection to the socket carrying one request (`send`) and its reply (`chunks`).

        exchange = await Exchange.open("/run/fleet/fleet.sock")
        try:
            status = await exchange.send("GET", "/v1/status")
            body = await exchange.read_body(limit=1 << 20)
        finally:
            exchange.close()
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.connection = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, socket_path: str) -> Exchange:
        """Connect to `socket_path` (OSError when nothing listens there)."""
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=READ_CHUNK)
        return cls(reader, writer)

    def close(self) -> None:
        """Close the connection (the server takes that as the client going away)."""
        self.writer.close()

    async def send(self, method: str, target: str, body: bytes | None = None,
                   content_type: str | None = None) -> int:
        """Send the request, then wait for the reply's head; its status code."""
        headers = [("Host", HOST), ("Connection", "close")]
        if body is not None:
            headers.append(("Content-Length", str(len(body))))
            if content_type is not None:
                headers.append(("Content-Type", content_type))
        try:
            self.writer.write(self.connection.send(h11.Request(
                method=method, target=target, headers=headers)) or b"")
            if body:  # passed through as it is, not copied
                self.writer.writelines(self.connection.send_with_data_passthrough(
                    h11.Data(data=body)) or ())
            self.writer.write(self.connection.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:  # a target with spaces or control characters
            raise ExchangeError(f"cannot send {method} {target!r}: {exc}") from exc
        await self.writer.drain()
        while True:
            event = await self._next_event(None)
            if isinstance(event, h11.Response):
                return event.status_code
            # an InformationalResponse (1xx) comes before the real one: read on

    async def chunks(self, idle_timeout_s: float | None = None) -> AsyncIterator[bytes]:
        """The reply's body as it arrives, until its end; TimeoutError when the server sends
        nothing for `idle_timeout_s`."""
        while True:
            event = await self._next_event(idle_timeout_s)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return

    async def read_body(self, limit: int) -> bytes:
        """The whole body; ExchangeError when it is over `limit` bytes."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:
                raise ExchangeError(f"a reply over {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def _next_event(self, idle_timeout_s: float | None) -> h11.Event:
        """The next h11 event of the reply, reading from the socket as h11 needs."""
        while True:
            try:
                event = self.connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise ExchangeError(f"broken reply: {exc}") from exc
            if event is h11.NEED_DATA:
                async with asyncio.timeout(idle_timeout_s):
                    data = await self.reader.read(READ_CHUNK)
                # b"" is the end of the connection: h11 says whether the reply was complete
                self.connection.receive_data(data)
                continue
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                raise ExchangeError("the server closed the connection before its reply")
            assert isinstance(event, h11.Event)
            return event
