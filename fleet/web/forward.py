"""`fleet web`: the server's web view on this user's own 127.0.0.1:PORT, forwarded to its socket.

Only GET (and HEAD) requests under /web/ are forwarded, so the local port never reaches the /v1
API, and each needs this run's random token (the printed link carries it once; then a cookie).
The socket is the server's own (local) or the local end of an SSH tunnel to a head node's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from yarl import URL

from fleet.errors import ConfigError, ServerUnavailable
from fleet.web.auth import token_middleware
from fleet.web.errors import SECURITY_HEADERS, security_headers
from fleet.web.html import ROOT

log = logging.getLogger(__name__)

UPSTREAM = web.AppKey("upstream", aiohttp.ClientSession)
# Headers that describe one hop, not the page: never copied across the forwarder.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                         "server", "date", "upgrade"})
# What a browser's request may tell the server (no cookie or token: those are the forwarder's).
# Accept-Encoding goes too, and the answer's body passes encoded as it came (a gzip'ed page
# crosses an SSH tunnel at 1/25 of its size); without one, the server is asked for none.
REQUEST_HEADERS = ("Accept", "Accept-Language", "Accept-Encoding", "Last-Event-ID",
                   "If-None-Match", "If-Modified-Since")
CONNECT_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Forwarder:
    """A running forwarder: the link to open (with its token) and how to stop it."""

    url: str
    runner: web.AppRunner


async def _forward(request: web.Request) -> web.StreamResponse:
    """Copy one GET of /web/... to the server's socket and its answer back, streamed."""
    upstream = request.app[UPSTREAM]
    path = posixpath.normpath(request.path)  # decoded: "/web/%2e%2e/v1" is "/v1" here
    if not (path + "/").startswith(ROOT):
        raise web.HTTPNotFound(text="only the web view's pages are forwarded")
    target = URL.build(path=path + ("/" if request.path.endswith("/") and path != "/" else ""),
                       query=request.query)
    headers = {"Accept-Encoding": "identity"}
    headers.update({name: request.headers[name] for name in REQUEST_HEADERS
                    if name in request.headers})
    try:
        async with upstream.request(request.method, target, headers=headers,
                                    allow_redirects=False) as reply:
            response = web.StreamResponse(status=reply.status, reason=reply.reason)
            for name, value in reply.headers.items():
                if name.lower() not in HOP_HEADERS:
                    response.headers.add(name, value)
            response.headers.update(SECURITY_HEADERS)  # this port's own rules, whatever came
            await response.prepare(request)
            async for chunk in reply.content.iter_any():  # server-sent events as they come
                await response.write(chunk)
            await response.write_eof()
            return response
    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
        log.warning("web: the server's socket did not answer %s: %s", request.path,
                    exc or type(exc).__name__)
        raise web.HTTPBadGateway(text="fleet serve did not answer (is it still running?)") \
            from exc


async def _to_overview(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(ROOT)


def forwarder_app(socket_path: Path, token: str) -> web.Application:
    """GET / → /web/, and GET /web/... forwarded to `socket_path`; everything needs `token`."""
    app = web.Application(middlewares=[security_headers, token_middleware(token)])
    app.router.add_get("/", _to_overview)
    app.router.add_get(ROOT + "{tail:.*}", _forward)

    async def upstream(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.UnixConnector(path=str(socket_path))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
        async with aiohttp.ClientSession("http://fleet", connector=connector, timeout=timeout,
                                         auto_decompress=False) as session:
            app[UPSTREAM] = session
            yield

    app.cleanup_ctx.append(upstream)
    return app


async def check_upstream(socket_path: Path, what: str) -> None:
    """ServerUnavailable unless the server on `socket_path` serves the web view."""
    connector = aiohttp.UnixConnector(path=str(socket_path))
    timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session, \
                session.get(f"http://fleet{ROOT}static/fleet.css") as reply:
            status = reply.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ServerUnavailable(f"{what}: no fleet serve answers: {exc or type(exc).__name__}"
                                ) from exc
    if status != 200:
        raise ServerUnavailable(f"{what}: this fleet serve has no web view (HTTP {status}); "
                                "it may be older than `fleet web`")


@asynccontextmanager
async def forward(socket_path: Path, port: int, what: str) -> AsyncIterator[Forwarder]:
    """Listen on 127.0.0.1:`port` (0: any free one) and forward to `socket_path` meanwhile."""
    await check_upstream(socket_path, what)
    token = secrets.token_urlsafe(24)
    runner = web.AppRunner(forwarder_app(socket_path, token), handle_signals=False,
                           access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
        except OSError as exc:
            raise ConfigError(f"--port {port}: cannot listen on 127.0.0.1:{port}: "
                              f"{exc.strerror or exc}") from exc
        bound_port = runner.addresses[0][1]
        yield Forwarder(f"http://127.0.0.1:{bound_port}{ROOT}?token={token}", runner)
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await runner.cleanup()
