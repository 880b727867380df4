"""The web view's application under /web/, mounted on the server's socket and on `--web`'s port.

    view = WebView(fleet)                         # rows from whichever monitor the service runs
    view.mount(unix_app, identities)              # before the socket's runner starts (fleet web)
    await view.start("0.0.0.0:8080", token_file)  # follow the monitor; listen on TCP too
    ...
    await view.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from fleet.errors import ConfigError
from fleet.server.app import app_runner
from fleet.server.identity import Identities
from fleet.snapshot import FleetSnapshot
from fleet.web.auth import token_middleware, web_bind
from fleet.web.errors import Middleware, html_errors, security_headers
from fleet.web.fragments import HostBlocks
from fleet.web.html import ROOT as PREFIX
from fleet.web.listen import listen_capped
from fleet.web.live import LiveRows

if TYPE_CHECKING:
    from fleet.service import Fleet

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
SHUTDOWN_TIMEOUT_S = 2.0
Snapshots = Callable[[], AsyncIterator[FleetSnapshot]]
# How often the web view looks for a monitor when none runs (a standby server has none).
MONITOR_LOOK_S = 0.5


@dataclass(frozen=True)
class WebContext:
    """What the pages read: the service layer and the live rows.

    `identities` names the caller where the pages are served on the Unix socket (`fleet web`),
    so a task's log is shown only to whom the API would show it; on `--web`'s port there is no
    caller to name, and the token is the permission. `host_blocks` is the overview's rendered
    hosts, shared by both mounts.
    """

    fleet: Fleet
    live: LiveRows
    identities: Identities | None = None
    host_blocks: HostBlocks = field(default_factory=HostBlocks)


WEB = web.AppKey("web", WebContext)


def web_app(context: WebContext) -> web.Application:
    """The pages, their live streams and the vendored assets, as an app to mount at PREFIX."""
    from fleet.web.html import TEMPLATES, environment
    from fleet.web.pages import add_pages
    from fleet.web.records import add_record_pages
    from fleet.web.usage import add_usage_page

    app = web.Application(middlewares=[security_headers, html_errors])
    app[WEB] = context
    app[TEMPLATES] = environment()
    add_pages(app)
    add_record_pages(app)
    add_usage_page(app)
    add_static_files(app)
    return app


def add_static_files(app: web.Application) -> None:
    """GET /static/NAME for the vendored assets, each file by name (the folder is flat); any
    other name is a 404 page like any other (aiohttp's static route answers an empty 404)."""
    names = frozenset(path.name for path in STATIC_DIR.iterdir() if path.is_file())

    async def static_file(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in names:
            raise web.HTTPNotFound(text=f"no such file: static/{name[:100]}")
        return web.FileResponse(STATIC_DIR / name)

    app.router.add_get("/static/{name}", static_file)


async def _to_overview(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(PREFIX)


def tcp_app(context: WebContext, token: str | None) -> web.Application:
    """The root of `--web`'s port: / sends to /web/; with a token, every request must show it."""
    middlewares: list[Middleware] = [security_headers]
    if token:
        middlewares.append(token_middleware(token))
    middlewares.append(html_errors)  # a 404 outside /web/ is the same page as one inside
    root = web.Application(middlewares=middlewares)
    root.router.add_get("/", _to_overview)
    root.add_subapp(PREFIX, web_app(context))
    return root


class WebView:
    """The web view of one server: its live rows, mounts, and its own TCP listener if asked."""

    def __init__(self, fleet: Fleet, snapshots: Snapshots | None = None) -> None:
        self.context = WebContext(fleet, LiveRows())
        self.snapshots = snapshots or (lambda: monitor_snapshots(fleet))
        self.url: str | None = None
        self._follower: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    def mount(self, parent: web.Application, identities: Identities) -> None:
        """Serve the pages under /web/ of the socket's app `parent` too (not frozen yet)."""
        parent.add_subapp(PREFIX, web_app(dataclasses.replace(self.context,
                                                              identities=identities)))

    async def start(self, address: str | None = None, token_file: Path | None = None) -> None:
        """Follow the monitor's snapshots; with `address` (`--web HOST:PORT`), listen there.

        ConfigError when the address is not loopback and there is no token file, when the
        token file is unusable, or when the address cannot be bound.
        """
        bind = web_bind(address, token_file) if address is not None else None
        self._follower = asyncio.create_task(self.context.live.follow(self.snapshots()),
                                             name="fleet-web-rows")
        self._follower.add_done_callback(_log_follow_end)
        if bind is None:
            return
        runner = app_runner(tcp_app(self.context, bind.token), SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        self._runner = runner
        assert runner.server is not None  # set up
        try:
            self._listener = await listen_capped(runner.server, bind.host, bind.port)
        except OSError as exc:
            raise ConfigError(f"--web: cannot listen on {bind.host}:{bind.port}: "
                              f"{exc.strerror or exc}") from exc
        host, port = self._listener.sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        self.url = f"http://{shown}:{port}{PREFIX}"
        log.info("web view on %s%s", self.url, " (token required)" if bind.token else "")

    async def close(self) -> None:
        """Stop listening and following; open pages see their streams end."""
        self.context.live.close()
        if self._listener is not None:
            self._listener.close()  # accept no more; the runner closes those open
        if self._runner is not None:
            await self._runner.cleanup()
        if self._listener is not None:
            await self._listener.wait_closed()
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower


async def monitor_snapshots(fleet: Fleet) -> AsyncIterator[FleetSnapshot]:
    """Every snapshot of the service's monitor, across its stops and starts (leader changes)."""
    while True:
        monitor = fleet.monitor
        if monitor is None:
            await asyncio.sleep(MONITOR_LOOK_S)
            continue
        first = True
        async for snapshot in monitor.subscribe():
            if first:  # everything is news to rows kept from before this subscription
                everyone = frozenset(host.spec.name for host in snapshot.hosts)
                snapshot, first = dataclasses.replace(snapshot, changed=everyone), False
            yield snapshot
        while fleet.monitor is monitor:  # noqa: ASYNC110 (its stream ended: until it is replaced)
            await asyncio.sleep(MONITOR_LOOK_S)


def _log_follow_end(follower: asyncio.Task[None]) -> None:
    """A follower that ends with an error leaves pages without updates: say so loudly."""
    if not follower.cancelled() and follower.exception() is not None:
        log.error("the web view's live rows stopped: %s", follower.exception(),
                  exc_info=follower.exception())
