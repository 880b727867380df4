"""The monitor part of the public `Fleet` service API (mixed into fleet.service.Fleet).

    async with fleet.open() as f:
        async for snapshot in f.watch("gpu*"):      # starts the monitor in-process if needed
            for host in snapshot.hosts:
                print(host.spec.name, host.state, [g.state for g in host.gpus])
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.inventory import Inventory
    from fleet.model import HostSpec
    from fleet.monitor.config import Settings
    from fleet.monitor.monitor import Monitor, SummaryCallback
    from fleet.snapshot import FleetSnapshot
    from fleet.ssh.options import SshOptions

# Housekeeping runs every 5 s; tasks are checked against their hosts every 6th pass.
RECONCILE_EVERY_PASSES = 6


class MonitorAPI:
    """Monitor operations of the Fleet service; state lives on the Fleet instance."""

    database: Database
    inventory: Inventory
    ssh_options: SshOptions
    _monitor: Monitor | None = None
    _monitor_watchers: int = 0  # watch() calls holding a monitor that watch() started
    _monitor_auto: bool = False

    _housekeeping_passes: int = 0

    hosts: Callable[[str | None], tuple[HostSpec, ...]]  # fleet.service.Fleet.hosts

    async def _housekeeping(self, monitor: Monitor) -> None:
        """Expire reservations, show allocations in snapshots, reconcile tasks every 30 s."""
        import asyncio

        from db.allocation_details import allocation_details
        from fleet.placement.reservations import expire
        from fleet.snapshot import AllocationInfo

        def load() -> dict[tuple[str, int], AllocationInfo]:
            expire(self.database)
            with self.database.session() as session:
                details = allocation_details(session, active_only=True)
            return {
                (d.host, d.gpu_idx): AllocationInfo(
                    allocation_id=d.id, kind=d.kind, owner=d.owner, task_id=d.task_id,
                    task_name=d.task_name,
                    expires_at=None if d.expires_at is None else float(d.expires_at),
                    note=d.note)
                for d in details
            }

        monitor.set_allocations(await asyncio.to_thread(load))
        self._housekeeping_passes += 1
        reconcile = getattr(self, "reconcile_tasks", None)
        if callable(reconcile) and self._housekeeping_passes % RECONCILE_EVERY_PASSES == 1:
            await reconcile()

    def monitor_settings(self) -> Settings:
        """The effective settings: defaults, the config file, the inventory's `settings:`."""
        from fleet.monitor.config import load_settings

        return load_settings(self.inventory)

    @property
    def monitor(self) -> Monitor | None:
        """The running in-process monitor, if any."""
        return self._monitor

    async def start_monitor(
        self,
        pattern: str | None = None,
        *,
        settings: Settings | None = None,
        on_summary: SummaryCallback | None = None,
    ) -> Monitor:
        """Start monitoring the selected hosts in this process (returns the running Monitor).

        ConfigError when a monitor is already running or no host matches `pattern`.
        """
        from fleet.monitor.monitor import Monitor

        if self._monitor is not None:
            raise ConfigError("the monitor is already running in this process")
        specs = self.hosts(pattern)
        if not specs:
            raise ConfigError(f"no host matches {pattern!r}")
        monitor = Monitor(
            specs,
            self.database,
            self.ssh_options,
            settings or self.monitor_settings(),
            on_summary=on_summary,
            housekeeping=self._housekeeping,
        )
        self._monitor = monitor
        try:
            await monitor.start()
        except BaseException:
            self._monitor = None
            await monitor.stop()
            raise
        return monitor

    async def stop_monitor(self) -> None:
        """Stop the in-process monitor: probes exit, buffered samples are written."""
        monitor, self._monitor = self._monitor, None
        self._monitor_auto = False
        self._monitor_watchers = 0
        if monitor is not None:
            await monitor.stop()

    def snapshot(self) -> FleetSnapshot | None:
        """The monitor's newest snapshot (None when no monitor runs or nothing is seen yet)."""
        return self._monitor.snapshot() if self._monitor is not None else None

    async def watch(self, pattern: str | None = None) -> AsyncGenerator[FleetSnapshot, None]:
        """The newest snapshot, then every change (coalesced for slow readers).

        Starts the monitor in this process if none runs; a monitor started this way stops when
        the last watch() using it ends. `pattern` narrows the hosts shown (and monitored, when
        this call starts the monitor).
        """
        from fleet.inventory import select_hosts

        names = frozenset(spec.name for spec in select_hosts(self.inventory, pattern))
        if self._monitor is None:
            await self.start_monitor(pattern)
            self._monitor_auto = True
        monitor = self._monitor
        assert monitor is not None
        owned = self._monitor_auto
        if owned:
            self._monitor_watchers += 1
        updates = monitor.subscribe(names if pattern else None)
        try:
            async for snapshot in updates:
                yield snapshot
        finally:
            with contextlib.suppress(RuntimeError):
                await updates.aclose()
            if owned and self._monitor is monitor:
                self._monitor_watchers -= 1
                if self._monitor_watchers <= 0:
                    await self.stop_monitor()
