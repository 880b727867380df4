"""`fleet serve`'s life: locks, the monitor, the socket with its mode and group, a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from fleet.errors import ConfigError
from fleet.health.metrics import MetricFamily
from fleet.monitor.monitor import Monitor
from fleet.server.app import StatusSource, app_runner, create_app
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.leader import Leadership, LeadershipLost
from fleet.server.locks import InstanceLock, ServerLock, database_lock_path, remove_stale_socket
from fleet.server.paths import default_socket_path, prepare_socket_dir
from fleet.server.routes import add_v1_routes
from fleet.server.settings import ServeSettings, state_dir
from fleet.server.stream import Broadcaster
from fleet.server.unix_socket import BACKLOG, listening_socket
from fleet.server.watch import snapshot_frame
from fleet.web.site import WebView

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.monitor.config import Settings
    from fleet.service import Fleet

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0
# While descriptors run out, asyncio reports each failed accept (up to its backlog, 100, every
# second, per listening socket); one line per this many seconds says as much.
ACCEPT_ERROR_QUIET_S = 60.0
ACCEPT_ERROR = "socket.accept() out of system resource"


@dataclass(frozen=True)
class ServeOptions:
    """What `fleet serve` was asked for (None: the settings' or built-in default)."""

    db_url: str | None = None
    inventory_path: Path | None = None
    socket_path: Path | None = None
    group: str | None = None
    pattern: str | None = None
    accept_new: bool = False
    web_bind: str | None = None  # `--web HOST:PORT`: the read-only web view on TCP too
    web_token_file: Path | None = None  # its token (needed off loopback)


def group_id(name: str | None) -> int | None:
    """The gid of group `name`; ConfigError naming it when there is no such group."""
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"--group: no group named {name!r}") from None


@contextlib.contextmanager
def _locked(*locks: ServerLock) -> Iterator[None]:
    held: list[ServerLock] = []
    try:
        for lock in locks:
            lock.acquire()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()


class AcceptErrorLog:
    """An event loop exception handler that logs asyncio's failed accepts once per burst.

    The first is logged (without a traceback: it is no bug), then the rest are counted and not
    logged until ACCEPT_ERROR_QUIET_S have passed; the next one then says how many there were.
    Every other error goes to the handler that was there before (or asyncio's default).
    """

    def __init__(self, previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]
                 | None) -> None:
        self.previous = previous
        self.suppressed = 0
        self.logged_at: float | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR:
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = loop.time()
        if self.logged_at is not None and now - self.logged_at < ACCEPT_ERROR_QUIET_S:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        log.error("cannot accept connections: %s; retrying every second%s",
                  context.get("exception"), more)
        self.logged_at, self.suppressed = now, 0


@contextlib.contextmanager
def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Log failed accepts once per burst (AcceptErrorLog) while in this block."""
    previous = loop.get_exception_handler()
    loop.set_exception_handler(AcceptErrorLog(previous))
    try:
        yield
    finally:
        loop.set_exception_handler(previous)


async def _pump(monitor: Monitor, broadcaster: Broadcaster) -> None:
    """Every snapshot the monitor publishes, encoded once, to every watching client."""
    async for snapshot in monitor.subscribe():
        broadcaster.publish(snapshot_frame(snapshot))


def _log_pump_end(pump: asyncio.Task[None]) -> None:
    """A pump that ends with an error leaves watchers without updates: say so loudly."""
    if not pump.cancelled() and pump.exception() is not None:
        log.error("the snapshot stream stopped: %s", pump.exception(),
                  exc_info=pump.exception())


def _serve_metrics(broadcaster: Broadcaster, monitor: Monitor | None) -> list[MetricFamily]:
    return [*(monitor.writer_metrics() if monitor is not None else []),
        MetricFamily("fleet_serve_watchers", "Clients streaming /v1/watch.",
                     samples=[({}, float(len(broadcaster.subscribers)))]),
        MetricFamily("fleet_serve_watchers_dropped", "Watch clients dropped for falling behind.",
                     "counter", [({}, float(broadcaster.dropped))]),
    ]


class LeaderDuties:
    """What only the leading server does: resume queued tasks, monitor (probes, samples,
    housekeeping) and stream snapshots to watchers."""

    def __init__(self, service: Fleet, broadcaster: Broadcaster, jobs: Jobs,
                 pattern: str | None, settings: Settings) -> None:
        self.service = service
        self.broadcaster = broadcaster
        self.jobs = jobs
        self.pattern = pattern
        self.settings = settings
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Resume what a stopped server left queued, then start the monitor and the stream."""
        self.service.context.may_probe = True
        resumed = await self.jobs.resume(self.service)  # before the reconciler calls them stale
        if resumed:
            log.info("resumed queued tasks %s", ", ".join(map(str, resumed)))
        monitor = await self.service.start_monitor(self.pattern, settings=self.settings)
        self._pump = asyncio.create_task(_pump(monitor, self.broadcaster),
                                         name="fleet-serve-pump")
        self._pump.add_done_callback(_log_pump_end)

    async def stop(self) -> None:
        """Stop the stream and the monitor (its buffered samples written, unless fenced)."""
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        await self.service.stop_monitor()


async def run_server(options: ServeOptions, stop: asyncio.Event, *,
                     on_ready: Callable[[Path, str], None] | None = None) -> None:
    """Serve until `stop` is set; `on_ready(socket_path, role)` once clients can connect.

    On PostgreSQL a second server on the database is the standby (role "standby, leader
    ..."): it answers reads and dispatches through the database's queue, and leads once the
    leader's lock is gone. Raises ConfigError when another server holds the socket or the
    SQLite database, or when the socket cannot be made; LeadershipLost when this server led
    and its lock was lost. Tasks on hosts are never touched by a stop.
    """
    import fleet.service

    gid = group_id(options.group)
    async with fleet.service.open(options.db_url, options.inventory_path,
                                  accept_new=options.accept_new) as service:
        settings = service.monitor_settings()
        serve_settings = settings.section("serve", ServeSettings)
        if options.socket_path is None:
            refuse_socket_clients_cannot_see(settings.origins.get("serve.socket"))
        socket_path, locks = _plan(options, serve_settings, service.database, gid)
        leadership = _leadership(service.database, serve_settings)
        with _locked(*locks), quiet_accept_errors(asyncio.get_running_loop()):
            remove_stale_socket(socket_path)
            broadcaster = Broadcaster(serve_settings.watch_queue)
            identities = Identities(serve_settings.admins, os.getuid())
            jobs = Jobs(state_dir(serve_settings) / "staged")
            duties = LeaderDuties(service, broadcaster, jobs, options.pattern, settings)
            source = StatusSource(service.snapshot,
                                  lambda: _serve_metrics(broadcaster, service.monitor))
            app = create_app(source,
                             lambda app: add_v1_routes(app, service, identities, broadcaster,
                                                       jobs, leadership))
            web_view = WebView(service)  # the read-only web view: /web/ here, and on --web
            web_view.mount(app, identities)
            runner = app_runner(app, SHUTDOWN_TIMEOUT_S)
            await runner.setup()
            try:
                await web_view.start(options.web_bind, options.web_token_file)
                if leadership is None or await leadership.try_lead():
                    await duties.start()
                    await _listen(runner, socket_path, gid)
                    if on_ready is not None:
                        on_ready(socket_path, "leader" if leadership is not None else "")
                else:
                    service.context.may_probe = False  # placement reads the leader's samples
                    await _listen(runner, socket_path, gid)
                    if on_ready is not None:
                        on_ready(socket_path, f"standby; leader {await leadership.leader()}")
                    if await leadership.campaign(stop):
                        await duties.start()
                await _until_stopped(stop, leadership)
            finally:
                await web_view.close()
                await jobs.close()  # tasks run on: their clients are told, reconcile records
                broadcaster.close()
                await duties.stop()
                await runner.cleanup()
                with contextlib.suppress(FileNotFoundError):
                    socket_path.unlink()
                if leadership is not None:
                    await leadership.close()
        if leadership is not None and leadership.lost.is_set():
            raise LeadershipLost(leadership.lost_reason())


def _leadership(database: Database, settings: ServeSettings) -> Leadership | None:
    """The pair's election on PostgreSQL (None on SQLite: one server per file, locked)."""
    if database.engine.dialect.name != "postgresql":
        return None
    return Leadership(database, timeout_s=settings.leader_timeout,
                      poll_s=settings.standby_poll)


async def _until_stopped(stop: asyncio.Event, leadership: Leadership | None) -> None:
    """Until `stop` is set, or (a leader) the leadership is lost."""
    waits = [asyncio.create_task(stop.wait())]
    if leadership is not None:
        waits.append(asyncio.create_task(leadership.lost.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


def refuse_socket_clients_cannot_see(origin: str | None) -> None:
    """ConfigError when `serve.socket` comes from the inventory's `settings:`: clients find
    the server by the settings file alone (they never load the inventory), so they would not
    find it there."""
    from fleet.settings_path import default_config_path

    if origin is None or origin == "default" or origin.startswith(f"{default_config_path()}:"):
        return
    raise ConfigError(f"{origin}: serve.socket in the inventory's settings is not seen by "
                      f"clients (they read it from {default_config_path()} only): set it there, "
                      "or pass --socket and give clients --server / FLEET_SERVER")


def _plan(options: ServeOptions, settings: ServeSettings, database: Database,
          gid: int | None) -> tuple[Path, list[ServerLock]]:
    """The socket path (made ready) and the locks to hold: the SQLite file's, then the socket's."""
    from fleet.storage import redact_url

    database_url = database.url

    if options.socket_path is not None:
        socket_path = options.socket_path
    elif settings.socket:
        socket_path = Path(settings.socket).expanduser()
    else:
        socket_path = default_socket_path()
    prepare_socket_dir(socket_path, group_id=gid)
    locks: list[ServerLock] = [InstanceLock(Path(f"{socket_path}.lock"), f"socket {socket_path}")]
    database_lock = database_lock_path(database_url)
    if database_lock is not None:  # PostgreSQL elects a leader instead (fleet.server.leader)
        locks.insert(0, InstanceLock(database_lock, f"SQLite database {redact_url(database_url)}",
                                     same_kind_hint="a standby pair needs PostgreSQL"))
    return socket_path, locks


async def _listen(runner: web.AppRunner, path: Path, gid: int | None) -> None:
    """Serve on the Unix socket at `path`, open to the owner or the group (it appears there
    only once it accepts connections: fleet.server.unix_socket)."""
    site = web.SockSite(runner, listening_socket(path, gid), backlog=BACKLOG)
    await site.start()
