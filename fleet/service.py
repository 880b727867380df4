"""The public async API shared by the CLI, the TUI and users' scripts.

    import asyncio, fleet

    async def main() -> None:
        async with fleet.open() as f:               # default inventory and database
            for host in await f.status():
                print(host.spec.name, host.state, len(host.report.gpus) if host.report else 0)

    asyncio.run(main())
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.api.discovery import DiscoveryAPI
from fleet.api.dispatch import DispatchAPI
from fleet.api.health import HealthAPI
from fleet.api.monitor import MonitorAPI
from fleet.api.placement import PlacementAPI
from fleet.errors import StorageError
from fleet.fanout import DEFAULT_FANOUT, HostStatus, ProgressCallback, probe_hosts
from fleet.inventory import Inventory, default_ssh_config_path, load_inventory, select_hosts
from fleet.model import HostSpec
from fleet.ssh.options import SshOptions

if TYPE_CHECKING:
    from db.engine import Database
    from db.types import GpuHistoryPoint, HostRow, LatestGpu


class Fleet(MonitorAPI, HealthAPI, PlacementAPI, DispatchAPI, DiscoveryAPI):
    """A session over one inventory and one database; create it with `fleet.open()`.

    Feature operations (monitor, health, placement, dispatch, discovery) come from the
    mixins in fleet/api/.
    """

    def __init__(self, database: Database, inventory: Inventory, ssh_options: SshOptions) -> None:
        self.database = database
        self.inventory = inventory
        self.ssh_options = ssh_options

    def hosts(self, pattern: str | None = None) -> tuple[HostSpec, ...]:
        """The inventory's hosts plus adopted ones, optionally filtered by a `--hosts` pattern."""
        return select_hosts(self.inventory_with_adopted(), pattern)

    async def status(
        self,
        pattern: str | None = None,
        *,
        timeout: float = 15.0,
        record: bool = True,
        fanout: int = DEFAULT_FANOUT,
        progress: ProgressCallback | None = None,
    ) -> list[HostStatus]:
        """Probe the selected hosts once, concurrently, and record what was seen."""
        specs = self.hosts(pattern)
        statuses = await probe_hosts(
            specs, self.ssh_options, timeout=timeout, fanout=fanout, progress=progress
        )
        if record:
            await asyncio.to_thread(self._record, statuses)
        return statuses

    def _record(self, statuses: Sequence[HostStatus]) -> None:
        from fleet.recorder import record_statuses

        with self._storage("record samples"), self.database.session() as session:
            record_statuses(session, statuses)

    async def registered_hosts(self) -> list[HostRow]:
        """Every host the database knows, with its last state and facts."""
        from db.hosts import list_hosts

        def load() -> list[HostRow]:
            with self._storage("list hosts"), self.database.session() as session:
                return list_hosts(session)

        return await asyncio.to_thread(load)

    async def latest_gpus(self, host_names: Sequence[str] | None = None) -> list[LatestGpu]:
        """Each known GPU with its latest recorded sample."""
        from db.gpus import latest_gpus

        def load() -> list[LatestGpu]:
            with self._storage("read latest samples"), self.database.session() as session:
                return latest_gpus(session, host_names)

        return await asyncio.to_thread(load)

    async def gpu_history(
        self,
        *,
        since: float,
        until: float,
        host: str | None = None,
        gpu: str | None = None,
        bucket_s: int | None = None,
        limit: int | None = None,
    ) -> list[GpuHistoryPoint]:
        """GPU samples between two epoch times, raw or aggregated per `bucket_s` seconds.

        Bucketed ranges older than the raw-sample retention are answered from the 1-minute
        rollups, so long histories stay available after raw samples are pruned.
        """
        from db.rollup_history import gpu_history_with_rollups

        def load() -> list[GpuHistoryPoint]:
            with self._storage("read history"), self.database.session() as session:
                return gpu_history_with_rollups(
                    session,
                    since_ms=int(since * 1000),
                    until_ms=int(until * 1000),
                    host=host,
                    gpu=gpu,
                    bucket_s=bucket_s,
                    limit=limit,
                )

        return await asyncio.to_thread(load)

    def _storage(self, action: str) -> _StorageGuard:
        return _StorageGuard(action, self.database.url)

    def close(self) -> None:
        """Release the database engine."""
        self.database.close()


class _StorageGuard:
    """Turns database errors into StorageError naming what fleet was doing."""

    def __init__(self, action: str, url: str) -> None:
        self.action = action
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        from db.errors import DatabaseError

        if isinstance(exc, SQLAlchemyError | DatabaseError):
            raise StorageError(f"cannot {self.action} in {_redact(self.url)}: {exc}") from exc


def _redact(url: str) -> str:
    """The URL without a password, for messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # unparsable: show only what follows any credentials
        return url.split("@")[-1]


def open_database(url: str | None) -> Database:
    """Open (creating and migrating) the database, as a StorageError on failure."""
    from db.engine import open_database as db_open
    from db.errors import DatabaseError

    try:
        return db_open(url)
    except DatabaseError as exc:
        raise StorageError(str(exc)) from exc


@asynccontextmanager
async def open(
    db: str | None = None,
    inventory: Path | None = None,
    *,
    ssh_options: SshOptions | None = None,
    accept_new: bool = False,
) -> AsyncIterator[Fleet]:
    """Open fleet on an inventory (default search path) and a database (default file)."""
    loaded_inventory = load_inventory(inventory, ssh_config=default_ssh_config_path())
    options = ssh_options or SshOptions()
    if accept_new:
        options = replace(options, accept_new=True)
    database = await asyncio.to_thread(open_database, db)
    service = Fleet(database, loaded_inventory, options)
    try:
        yield service
    finally:
        try:
            await service.stop_monitor()
        finally:
            service.close()


def now() -> float:
    """Current epoch time; one place so tests and callers agree."""
    return time.time()
