"""`fleet monitor --http`: the same aiohttp app's /status and /metrics on a loopback TCP port."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from aiohttp import web

from fleet.errors import ConfigError
from fleet.server.app import (
    ExtraMetrics,
    SnapshotSource,
    StatusSource,
    app_runner,
    create_app,
)

DEFAULT_PORT = 9400
SHUTDOWN_TIMEOUT_S = 2.0


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


@dataclass
class StatusSite:
    """A running status endpoint; `port` is the bound one (useful with port 0)."""

    runner: web.AppRunner
    host: str
    port: int

    async def close(self) -> None:
        """Stop listening and close open connections."""
        await self.runner.cleanup()


async def start_status_site(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    snapshot: SnapshotSource,
    extra_metrics: ExtraMetrics | None = None,
    allow_remote: bool = False,
) -> StatusSite:
    """Listen on host:port and serve /status and /metrics until closed.

    Raises ConfigError for a non-loopback `host` unless `allow_remote`, and when the address
    cannot be bound (in use, not local).

    Only the read-only routes are served over TCP: there are no peer credentials there, so the /v1
    API stays on the Unix socket. A non-loopback address must be allowed explicitly.
    """
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the status endpoint on non-loopback address {host}: "
            "it is unauthenticated; allow it explicitly if that is intended"
        )
    runner = app_runner(create_app(StatusSource(snapshot, extra_metrics)), SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    bound = runner.addresses[0]
    return StatusSite(runner, str(bound[0]), int(bound[1]))
