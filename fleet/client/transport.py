"""HTTP over the server's Unix socket: typed requests, error structs back to FleetErrors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from fleet.client.http import Exchange, ExchangeError
from fleet.errors import FleetError, ServerUnavailable
from fleet.wire.codec import API_PREFIX, JSON, WireError, decode, encode
from fleet.wire.errors import ErrorReply, error_from_wire

T = TypeVar("T")

REQUEST_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
# The server sends a keepalive comment every 15 s; silence this long means it is gone.
STREAM_IDLE_TIMEOUT_S = 45.0
MAX_EVENT_BYTES = 64 << 20
# A reply bigger than this is not one fleet serve sends (a 10,000-task list is a few MB).
MAX_REPLY_BYTES = 256 << 20


class Transport:
    """Requests to the `fleet serve` on one socket, each on its own connection
    (fleet.client.http).

    Every request has a deadline; a socket that is missing, refuses, or answers something that is
    not fleet's wire format is ServerUnavailable (exit code 9), never a raw socket or HTTP error.
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._open_exchanges: set[Exchange] = set()

    async def close(self) -> None:
        """Close any connection still open (a stream left unread)."""
        for exchange in list(self._open_exchanges):
            self._done(exchange)

    def _unavailable(self, why: object) -> ServerUnavailable:
        return ServerUnavailable(f"cannot reach fleet serve at {self.socket_path}: {why}")

    async def _open(self) -> Exchange:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                exchange = await Exchange.open(str(self.socket_path))
        except TimeoutError as exc:
            raise self._unavailable(f"no connection within {CONNECT_TIMEOUT_S:g}s") from exc
        self._open_exchanges.add(exchange)
        return exchange

    def _done(self, exchange: Exchange) -> None:
        self._open_exchanges.discard(exchange)
        exchange.close()

    async def get(self, path: str, kind: type[T], params: Mapping[str, Any] | None = None,
                  timeout_s: float = REQUEST_TIMEOUT_S) -> T:
        """GET /v1/PATH as a `kind` struct."""
        return await self._call("GET", path, kind, None, params, timeout_s)

    async def post(self, path: str, body: object, kind: type[T],
                   timeout_s: float = REQUEST_TIMEOUT_S) -> T:
        """POST a struct to /v1/PATH; the reply as a `kind` struct."""
        return await self._call("POST", path, kind, encode(body), None, timeout_s)

    async def _call(self, method: str, path: str, kind: type[T], data: bytes | None,
                    params: Mapping[str, Any] | None, timeout_s: float) -> T:
        try:
            async with asyncio.timeout(timeout_s):
                exchange = await self._open()
                try:
                    status = await exchange.send(method, _target(path, params), data,
                                                 JSON if data is not None else None)
                    payload = await exchange.read_body(MAX_REPLY_BYTES)
                finally:
                    self._done(exchange)
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise self._unavailable(f"no answer to {method} {path} within {timeout_s:g}s") \
                from exc
        except (ExchangeError, OSError) as exc:
            raise self._unavailable(_reason(exc)) from exc
        return self._decode(status, payload, kind)

    def _decode(self, status: int, payload: bytes, kind: type[T]) -> T:
        try:
            if status >= 400:
                raise error_from_wire(decode(payload, ErrorReply).error)
            return decode(payload, kind)
        except WireError as exc:
            raise self._unavailable(f"HTTP {status} with an unreadable body ({exc})") from exc

    async def events(self, path: str, params: Mapping[str, Any] | None = None, *,
                     body: object | None = None) -> AsyncGenerator[tuple[str, bytes], None]:
        """Server-sent events of GET /v1/PATH (POST with `body`) as (event, data) pairs until
        the stream ends. Closing the generator (or cancelling its reader) closes the
        connection, which the server takes as the client going away."""
        method, data = ("GET", None) if body is None else ("POST", encode(body))
        try:
            exchange = await self._open()
            try:
                async with asyncio.timeout(STREAM_IDLE_TIMEOUT_S):
                    status = await exchange.send(method, _target(path, params), data,
                                                 JSON if data is not None else None)
                    if status >= 400:
                        self._decode(status, await exchange.read_body(MAX_REPLY_BYTES),
                                     ErrorReply)
                async for raw in _split_events(exchange.chunks(STREAM_IDLE_TIMEOUT_S)):
                    parsed = _parse_event(raw)
                    if parsed is not None:
                        yield parsed
            finally:
                self._done(exchange)
        except FleetError:
            raise
        except TimeoutError as exc:
            raise self._unavailable(f"nothing from the server for {STREAM_IDLE_TIMEOUT_S:g}s "
                                    f"on {method} {path}") from exc
        except (ExchangeError, OSError) as exc:
            raise self._unavailable(_reason(exc)) from exc


async def _split_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The blank-line-separated blocks of an event stream (ExchangeError for one over
    MAX_EVENT_BYTES); a last block without its blank line is dropped, as SSE says."""
    buffer = bytearray()
    async for chunk in chunks:
        searched = max(len(buffer) - 1, 0)  # a separator may straddle two chunks
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n\n", max(start, searched))) >= 0:
            yield bytes(buffer[start:end])
            start = end + 2
        del buffer[:start]
        if len(buffer) > MAX_EVENT_BYTES:
            raise ExchangeError(f"an event over {MAX_EVENT_BYTES} bytes")


def _parse_event(raw: bytes) -> tuple[str, bytes] | None:
    """One SSE block as (event, data); None for comments (keepalives)."""
    event, data = "message", []
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode(errors="replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
    return (event, b"\n".join(data)) if data else None


def _reason(exc: BaseException) -> str:
    """What went wrong, for a message: the OS's words for a socket error."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _target(path: str, params: Mapping[str, Any] | None) -> str:
    """/v1/PATH?query: None left out, sequences repeated, booleans as true/false."""
    target = f"{API_PREFIX}/{path}"
    if params is None:
        return target
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is not None:
                pairs.append((key, str(item).lower() if isinstance(item, bool) else str(item)))
    return f"{target}?{urlencode(pairs, quote_via=quote)}" if pairs else target
