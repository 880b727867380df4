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
from typing import TYPE_CHECKING

from aiohttp import web

from fleet.errors import ConfigError
from fleet.health.metrics import MetricFamily
from fleet.monitor.monitor import Monitor
from fleet.server.app import StatusSource, create_app
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.locks import (
    InstanceLock,
    PostgresServeLock,
    ServerLock,
    database_lock_path,
    remove_stale_socket,
)
from fleet.server.paths import default_socket_path, prepare_socket_dir
from fleet.server.routes import add_v1_routes
from fleet.server.settings import ServeSettings, state_dir
from fleet.server.stream import Broadcaster
from fleet.server.watch import snapshot_frame

if TYPE_CHECKING:
    from db.engine import Database

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServeOptions:
    """What `fleet serve` was asked for (None: the settings' or built-in default)."""

    db_url: str | None = None
    inventory_path: Path | None = None
    socket_path: Path | None = None
    group: str | None = None
    pattern: str | None = None
    accept_new: bool = False


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


async def _pump(monitor: Monitor, broadcaster: Broadcaster) -> None:
    """Every snapshot the monitor publishes, encoded once, to every watching client."""
    async for snapshot in monitor.subscribe():
        broadcaster.publish(snapshot_frame(snapshot))


def _log_pump_end(pump: asyncio.Task[None]) -> None:
    """A pump that ends with an error leaves watchers without updates: say so loudly."""
    if not pump.cancelled() and pump.exception() is not None:
        log.error("the snapshot stream stopped: %s", pump.exception(),
                  exc_info=pump.exception())


def _serve_metrics(broadcaster: Broadcaster, monitor: Monitor) -> list[MetricFamily]:
    return [*monitor.writer_metrics(),
        MetricFamily("fleet_serve_watchers", "Clients streaming /v1/watch.",
                     samples=[({}, float(len(broadcaster.subscribers)))]),
        MetricFamily("fleet_serve_watchers_dropped", "Watch clients dropped for falling behind.",
                     "counter", [({}, float(broadcaster.dropped))]),
    ]


async def run_server(options: ServeOptions, stop: asyncio.Event, *,
                     on_ready: Callable[[Path], None] | None = None) -> None:
    """Serve until `stop` is set; `on_ready(socket_path)` once clients can connect.

    Raises ConfigError when another server holds the socket or the database, or when the
    socket cannot be made; tasks on hosts are never touched by a stop.
    """
    import fleet.service

    gid = group_id(options.group)
    async with fleet.service.open(options.db_url, options.inventory_path,
                                  accept_new=options.accept_new) as service:
        settings = service.monitor_settings()
        serve_settings = settings.section("serve", ServeSettings)
        socket_path, locks = _plan(options, serve_settings, service.database, gid)
        with _locked(*locks):
            remove_stale_socket(socket_path)
            broadcaster = Broadcaster(serve_settings.watch_queue)
            identities = Identities(serve_settings.admins, os.getuid())
            jobs = Jobs(state_dir(serve_settings) / "staged")
            resumed = await jobs.resume(service)  # before the reconciler could call them stale
            if resumed:
                log.info("resumed queued tasks %s", ", ".join(map(str, resumed)))
            monitor = await service.start_monitor(options.pattern, settings=settings)
            pump = asyncio.create_task(_pump(monitor, broadcaster), name="fleet-serve-pump")
            pump.add_done_callback(_log_pump_end)
            source = StatusSource(service.snapshot, lambda: _serve_metrics(broadcaster, monitor))
            app = create_app(source,
                             lambda app: add_v1_routes(app, service, identities, broadcaster,
                                                       jobs))
            runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                   shutdown_timeout=SHUTDOWN_TIMEOUT_S)
            await runner.setup()
            try:
                await _listen(runner, socket_path, gid)
                if on_ready is not None:
                    on_ready(socket_path)
                await stop.wait()
            finally:
                await jobs.close()  # tasks run on: their clients are told, reconcile records
                broadcaster.close()
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
                await runner.cleanup()
                with contextlib.suppress(FileNotFoundError):
                    socket_path.unlink()
                await service.stop_monitor()


def _plan(options: ServeOptions, settings: ServeSettings, database: Database,
          gid: int | None) -> tuple[Path, list[ServerLock]]:
    """The socket path (made ready) and the locks to hold: the database's, then the socket's."""
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
    what = f"database {redact_url(database_url)}"
    if database_lock is not None:
        locks.insert(0, InstanceLock(database_lock, what))
    elif database.engine.dialect.name == "postgresql":
        locks.insert(0, PostgresServeLock(database, what))
    return socket_path, locks


async def _listen(runner: web.AppRunner, path: Path, gid: int | None) -> None:
    """Bind the socket closed to everyone (umask), then open it to the owner or the group."""
    site = web.UnixSite(runner, str(path))
    previous = os.umask(0o177)
    try:
        await site.start()
    except OSError as exc:
        raise ConfigError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    finally:
        os.umask(previous)
    if gid is not None:
        os.chown(path, -1, gid)
        os.chmod(path, 0o660)
    else:
        os.chmod(path, 0o600)
