"""HTTP over the server's Unix socket: typed requests, error structs back to FleetErrors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from fleet.errors import FleetError, ServerUnavailable
from fleet.wire.codec import API_PREFIX, JSON, WireError, decode, encode
from fleet.wire.errors import ErrorReply, error_from_wire

T = TypeVar("T")

REQUEST_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
# The server sends a keepalive comment every 15 s; silence this long means it is gone.
STREAM_IDLE_TIMEOUT_S = 45.0
MAX_EVENT_BYTES = 64 << 20
BASE_URL = "http://fleet"  # the host part is ignored on a Unix socket


class Transport:
    """One aiohttp session on one socket; `async with` closes it.

    Every request has a deadline; a socket that is missing, refuses, or answers something that is
    not fleet's wire format is ServerUnavailable (exit code 9), never a raw aiohttp error.
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(socket_path)),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))

    async def close(self) -> None:
        """Close the session and its connection."""
        await self.session.close()

    def _unavailable(self, why: object) -> ServerUnavailable:
        return ServerUnavailable(f"cannot reach fleet serve at {self.socket_path}: {why}")

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
        url = f"{BASE_URL}{API_PREFIX}/{path}"
        try:
            async with self.session.request(
                    method, url, data=data, params=_query(params),
                    headers={"Content-Type": JSON} if data is not None else None,
                    timeout=aiohttp.ClientTimeout(total=timeout_s,
                                                  connect=CONNECT_TIMEOUT_S)) as reply:
                payload = await reply.read()
                status = reply.status
        except (aiohttp.ClientError, OSError) as exc:
            raise self._unavailable(exc or type(exc).__name__) from exc
        except TimeoutError as exc:
            raise self._unavailable(f"no answer to {method} {path} within {timeout_s:g}s") \
                from exc
        return self._decode(status, payload, kind)

    def _decode(self, status: int, payload: bytes, kind: type[T]) -> T:
        try:
            if status >= 400:
                raise error_from_wire(decode(payload, ErrorReply).error)
            return decode(payload, kind)
        except WireError as exc:
            raise self._unavailable(f"HTTP {status} with an unreadable body ({exc})") from exc

    async def events(self, path: str, params: Mapping[str, Any] | None = None, *,
                     body: object | None = None) -> AsyncIterator[tuple[str, bytes]]:
        """Server-sent events of GET /v1/PATH (POST with `body`) as (event, data) pairs until
        the stream ends."""
        url = f"{BASE_URL}{API_PREFIX}/{path}"
        timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S,
                                        sock_read=STREAM_IDLE_TIMEOUT_S)
        method, data = ("GET", None) if body is None else ("POST", encode(body))
        try:
            async with self.session.request(
                    method, url, params=_query(params), data=data, timeout=timeout,
                    headers={"Content-Type": JSON} if data is not None else None) as reply:
                if reply.status >= 400:
                    self._decode(reply.status, await reply.read(), ErrorReply)
                buffer = b""
                async for chunk in reply.content.iter_any():
                    buffer += chunk
                    if len(buffer) > MAX_EVENT_BYTES:
                        raise self._unavailable(f"an event over {MAX_EVENT_BYTES} bytes")
                    while b"\n\n" in buffer:
                        raw, buffer = buffer.split(b"\n\n", 1)
                        parsed = _parse_event(raw)
                        if parsed is not None:
                            yield parsed
        except FleetError:
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise self._unavailable(exc or type(exc).__name__) from exc


def _parse_event(raw: bytes) -> tuple[str, bytes] | None:
    """One SSE block as (event, data); None for comments (keepalives)."""
    event, data = "message", []
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode(errors="replace")
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
    return (event, b"\n".join(data)) if data else None


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str]] | None:
    """Query pairs: None left out, sequences repeated, booleans as true/false."""
    if params is None:
        return None
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is not None:
                pairs.append((key, str(item).lower() if isinstance(item, bool) else str(item)))
    return pairs
