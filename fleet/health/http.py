"""Read-only HTTP status endpoint: /status (latest snapshot as JSON) and /metrics (Prometheus).

A deliberately tiny HTTP/1.1 server on asyncio: GET and HEAD only, one request per connection,
request head capped at MAX_REQUEST_BYTES and read within READ_TIMEOUT_S. Binds to loopback
unless a non-loopback address is explicitly allowed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
from collections.abc import Callable, Sequence

from fleet.errors import ConfigError
from fleet.health.metrics import CONTENT_TYPE, MetricFamily, render_metrics, snapshot_metrics
from fleet.snapshot import FleetSnapshot

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 10.0
DEFAULT_PORT = 9400

SnapshotSource = Callable[[], FleetSnapshot | None]
ExtraMetrics = Callable[[], Sequence[MetricFamily]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


def is_loopback(host: str) -> bool:
    """True for "localhost" and loopback IPv4/IPv6 addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen_address(text: str) -> tuple[str, int]:
    """"HOST:PORT", "[V6]:PORT" or ":PORT"/"PORT" (loopback) → (host, port); ConfigError if bad."""
    value = text.strip()
    host, _, port_text = value.rpartition(":") if ":" in value else ("", "", value)
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"invalid listen address {text!r}: expected HOST:PORT, "
                          "e.g. 127.0.0.1:9400") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"invalid port {port} in listen address {text!r}")
    return host, port


def snapshot_to_dict(snapshot: FleetSnapshot) -> dict[str, object]:
    """The snapshot as JSON-ready data (sets become sorted lists)."""
    data = dataclasses.asdict(snapshot)
    data["changed"] = sorted(snapshot.changed)
    return data


async def start_status_server(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    snapshot: SnapshotSource,
    extra_metrics: ExtraMetrics | None = None,
    allow_remote: bool = False,
) -> asyncio.Server:
    """Listen on host:port (port 0 picks one; see `server.sockets`) and serve until closed.

    Raises ConfigError for a non-loopback `host` unless `allow_remote`, and when the address
    cannot be bound (in use, not local).
    """
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the status endpoint on non-loopback address {host}: "
            "it is unauthenticated; allow it explicitly if that is intended"
        )
    handler = _Handler(snapshot, extra_metrics)
    try:
        return await asyncio.start_server(handler.serve, host, port, limit=MAX_REQUEST_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


class _Handler:
    """Answers one request per connection."""

    def __init__(self, snapshot: SnapshotSource, extra_metrics: ExtraMetrics | None) -> None:
        self.snapshot = snapshot
        self.extra_metrics = extra_metrics

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, content_type, body, head_only = await self._respond(reader)
            reason = _REASONS.get(status, "")
            head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                    "Cache-Control: no-store\r\n")
            if status == 405:
                head += "Allow: GET, HEAD\r\n"
            writer.write(head.encode() + b"\r\n" + (b"" if head_only else body))
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await writer.drain()
        except (ConnectionError, TimeoutError) as exc:
            log.debug("status client went away: %s", exc)
        finally:
            writer.close()
            try:
                async with asyncio.timeout(WRITE_TIMEOUT_S):
                    await writer.wait_closed()
            except (ConnectionError, TimeoutError) as exc:
                log.debug("status client close: %s", exc)

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes, bool]:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return _text(431, "request too large\n")
        except asyncio.IncompleteReadError:
            return _text(400, "incomplete request\n")
        except TimeoutError:
            return _text(408, "request not received in time\n")
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _text(400, "malformed request line\n")
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return _text(405, "only GET and HEAD\n")
        path = target.split("?", 1)[0]
        status, content_type, body = self._route(path)
        return status, content_type, body, method == "HEAD"

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            families = snapshot_metrics(self.snapshot())
            if self.extra_metrics is not None:
                families.extend(self.extra_metrics())
            return 200, CONTENT_TYPE, render_metrics(families).encode()
        if path == "/status":
            current = self.snapshot()
            if current is None:
                body = json.dumps({"error": "no snapshot yet"}).encode()
                return 503, "application/json", body
            text = json.dumps(snapshot_to_dict(current), default=str, separators=(",", ":"))
            return 200, "application/json", text.encode()
        if path == "/":
            return 200, "text/plain; charset=utf-8", b"fleet status endpoint: /status /metrics\n"
        status, content_type, body, _ = _text(404, "no such path; try /status or /metrics\n")
        return status, content_type, body


def _text(status: int, message: str) -> tuple[int, str, bytes, bool]:
    return status, "text/plain; charset=utf-8", message.encode(), False
