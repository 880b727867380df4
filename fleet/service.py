"""The public async API shared by the CLI, the TUI and users' scripts: `fleet.open()` → `Fleet`.

    import asyncio, fleet

    async def main() -> None:
        async with fleet.open() as f:               # default inventory and database
            for host in await f.status():
                print(host.spec.name, host.state, len(host.report.gpus) if host.report else 0)

    asyncio.run(main())

`Fleet` composes small services over one `FleetContext` (fleet/services/); its methods are
theirs, bound once here, so every caller reaches the same code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.context import FleetContext
from fleet.services.database import DatabaseService
from fleet.services.discovery import DiscoveryOutcome, DiscoveryService
from fleet.services.dispatch import DispatchService
from fleet.services.health import HealthService
from fleet.services.hosts import HostService
from fleet.services.monitor import MonitorService
from fleet.services.placement import PlacementService
from fleet.services.usage import UsageService
from fleet.ssh.options import SshOptions
from fleet.storage import redact_url, storage_errors

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.inventory import Inventory
    from fleet.monitor.monitor import Monitor

__all__ = ["DiscoveryOutcome", "Fleet", "now", "open", "open_database", "redact_url"]


class Fleet:
    """A session over one inventory and one database; create it with `fleet.open()`."""

    remote = False  # this process does the work (`RemoteFleet.remote` is True)

    def __init__(self, database: Database, inventory: Inventory | Callable[[], Inventory],
                 ssh_options: SshOptions, *, clock: Callable[[], float] = time.time) -> None:
        self.context = FleetContext(database, inventory, ssh_options, clock=clock)
        self.host_service = HostService(self.context)
        self.placement_service = PlacementService(self.context, self.host_service)
        self.dispatch_service = DispatchService(self.context, self.placement_service)
        self.monitor_service = MonitorService(self.context, self.placement_service,
                                              self.dispatch_service.reconcile_tasks)
        self.placement_service.live_snapshot = self.monitor_service.snapshot
        self.health_service = HealthService(self.context)
        self.health_service.drains_changed = self.monitor_service.refresh_drains
        self.placement_service.refresh_drains = self.monitor_service.refresh_drains
        self.discovery_service = DiscoveryService(self.context)
        self.database_service = DatabaseService(self.context)
        self.usage_service = UsageService(self.context)

        # hosts
        self.hosts = self.host_service.hosts
        self.managed_hosts = self.host_service.managed_hosts
        self.status = self.host_service.status
        self.registered_hosts = self.host_service.registered_hosts
        self.latest_gpus = self.host_service.latest_gpus
        self.gpu_history = self.host_service.gpu_history
        # live
        self.monitor_settings = self.monitor_service.monitor_settings
        self.start_monitor = self.monitor_service.start_monitor
        self.stop_monitor = self.monitor_service.stop_monitor
        self.snapshot = self.monitor_service.snapshot
        self.watch = self.monitor_service.watch
        # history and health
        self.events = self.health_service.events
        self.host_history = self.health_service.host_history
        self.drain = self.health_service.drain
        self.undrain = self.health_service.undrain
        self.usage = self.usage_service.usage
        # placement
        self.candidates = self.placement_service.candidates
        self.place = self.placement_service.place
        self.place_and_claim = self.placement_service.place_and_claim
        self.reserve = self.placement_service.reserve
        self.reserve_gpus = self.placement_service.reserve_gpus
        self.release = self.placement_service.release
        self.release_mine = self.placement_service.release_mine
        self.allocations = self.placement_service.allocations
        self.unmanaged_use = self.placement_service.unmanaged_use
        # tasks
        self.submit = self.dispatch_service.submit
        self.dispatch = self.dispatch_service.dispatch
        self.dispatch_array = self.dispatch_service.dispatch_array
        self.resume_array = self.dispatch_service.resume_array
        self.members = self.dispatch_service.members
        self.resume_queued = self.dispatch_service.resume_queued
        self.follow = self.dispatch_service.follow
        self.cancel = self.dispatch_service.cancel
        self.task = self.dispatch_service.task
        self.tasks = self.dispatch_service.tasks
        self.reconcile_tasks = self.dispatch_service.reconcile_tasks
        self.run_on_hosts = self.dispatch_service.run_on_hosts
        # discovery
        self.discovery_settings = self.discovery_service.discovery_settings
        self.known_endpoints = self.discovery_service.known_endpoints
        self.discover = self.discovery_service.discover
        self.discovered_hosts = self.discovery_service.discovered_hosts
        self.watch_discovery = self.discovery_service.watch_discovery
        self.adopt = self.discovery_service.adopt
        # database maintenance
        self.apply_retention = self.database_service.apply_retention

    @property
    def database(self) -> Database:
        """The open database."""
        return self.context.database

    @property
    def inventory(self) -> Inventory:
        """The inventory as loaded (without adopted hosts; see `hosts()` for the managed set)."""
        return self.context.inventory

    @property
    def ssh_options(self) -> SshOptions:
        """The SSH options every connection of this session uses."""
        return self.context.ssh_options

    @property
    def monitor(self) -> Monitor | None:
        """The running in-process monitor, if any."""
        return self.monitor_service.monitor

    def inventory_with_adopted(self) -> Inventory:
        """The inventory plus adopted hosts (group `adopted`): what fleet manages."""
        return self.context.hosts.inventory()

    def close(self) -> None:
        """Release the database engine."""
        self.context.database.close()


def open_database(url: str | None) -> Database:
    """Open (creating and migrating) the database, as a StorageError on failure."""
    from db.engine import open_database as db_open

    with storage_errors(None):
        return db_open(url)


@asynccontextmanager
async def open(
    db: str | None = None,
    inventory: Path | None = None,
    *,
    ssh_options: SshOptions | None = None,
    accept_new: bool = False,
) -> AsyncIterator[Fleet]:
    """Open fleet on an inventory (default search path) and a database (default file).

    The inventory is read when first needed, so database-only calls never touch it (nor
    import the inventory package).
    """
    options = ssh_options or SshOptions()
    if accept_new:
        options = replace(options, accept_new=True)

    def load() -> Inventory:
        from fleet.inventory import default_ssh_config_path, load_inventory

        return load_inventory(inventory, ssh_config=default_ssh_config_path())

    database = await asyncio.to_thread(open_database, db)
    service = Fleet(database, load, options)
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
