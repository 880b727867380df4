"""The in-process monitor: start/stop, live snapshots, `watch()` and its housekeeping.

    async with fleet.open() as f:
        async for snapshot in f.watch("gpu*"):      # starts the monitor in-process if needed
            for host in snapshot.hosts:
                print(host.spec.name, host.state, [g.state for g in host.gpus])
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from fleet.context import FleetContext
    from fleet.monitor.config import Settings
    from fleet.monitor.monitor import Monitor
    from fleet.monitor.summary import SummaryCallback
    from fleet.reports import ProcessInfo
    from fleet.services.placement import PlacementService
    from fleet.snapshot import FleetSnapshot

# Housekeeping runs every 5 s; tasks are checked against their hosts every 6th pass.
RECONCILE_EVERY_PASSES = 6
Reconcile = Callable[[], Awaitable[object]]
StoredProcesses: TypeAlias = "tuple[dict[str, Any], ...]"  # what db.unmanaged keeps per GPU


class MonitorService:
    """One monitor per process, shared by every watch() of this fleet session."""

    def __init__(self, context: FleetContext, placement: PlacementService,
                 reconcile: Reconcile) -> None:
        self.context = context
        self.placement = placement
        self.reconcile = reconcile
        self._monitor: Monitor | None = None
        self._pattern: str | None = None  # the --hosts pattern the running monitor selects by
        self._watchers = 0  # watch() calls holding a monitor that watch() started
        self._started_by_watch = False
        self._housekeeping_passes = 0
        # what the database holds of each GPU's unmanaged processes (written when it changes;
        # None until the first pass has written every GPU's, clearing a previous server's)
        self._stored_unmanaged: dict[tuple[str, int], StoredProcesses] | None = None

    async def _housekeeping(self, monitor: Monitor) -> None:
        """Watch hosts adopted since the last pass, expire reservations, mark idle holdings,
        show allocations in snapshots, report processes fleet did not start, reconcile tasks
        every 30 s."""
        from fleet.placement.idle import IdleSettings

        await self._watch_adopted(monitor)
        await self.placement.expire_reservations()
        await self.placement.mark_idle(monitor.settings.section("idle", IdleSettings))
        await self._report_unmanaged(monitor)
        monitor.set_allocations(await self.placement.active_allocations())
        self._housekeeping_passes += 1
        if self._housekeeping_passes % RECONCILE_EVERY_PASSES == 1:
            await self.reconcile()

    async def _watch_adopted(self, monitor: Monitor) -> None:
        """Start watching the managed hosts the monitor's pattern selects that it does not
        watch yet: hosts adopted (by any process) since it started."""
        from fleet.inventory import select_hosts

        managed = await self.context.hosts.refresh()
        try:
            selected = select_hosts(managed, self._pattern)
        except ConfigError:  # a term of the pattern matches no host now: nothing new to add
            return
        await monitor.add_hosts(selected)

    async def _report_unmanaged(self, monitor: Monitor) -> None:
        """One `gpu_unmanaged_use` event per process fleet did not start (fleet.health.unmanaged).
        """
        from db.task_runs import task_sessions
        from fleet.health.unmanaged import unmanaged_event

        snapshot = monitor.snapshot()
        if snapshot is None:
            return
        sessions = await self.context.query("read task sessions", task_sessions)
        for use in monitor.unmanaged.check(snapshot, sessions):
            monitor.writer.add_event(unmanaged_event(use))
        now_unmanaged = {(host.spec.name, gpu.index): _stored_form(monitor.unmanaged.current(
            (host.spec.name, gpu.index))) for host in snapshot.hosts for gpu in host.gpus}
        stored = self._stored_unmanaged
        changed = {key: processes for key, processes in now_unmanaged.items()
                   if stored is None or stored.get(key, ()) != processes}  # first: all
        written = await self.context.write(
            "store unmanaged use", lambda session: _store_unmanaged(session, changed)) \
            if changed else {}
        self._stored_unmanaged = {**(stored or {}), **written}  # unwritten ones: next pass

    def monitor_settings(self) -> Settings:
        """The effective settings: defaults, the config file, the inventory's `settings:`."""
        from fleet.monitor.config import load_settings

        return load_settings(self.context.inventory)

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
        """Start monitoring the selected managed hosts in this process (returns the Monitor).

        ConfigError when a monitor is already running or no host matches `pattern`.
        """
        from fleet.inventory import select_hosts
        from fleet.monitor.monitor import Monitor

        if self._monitor is not None:
            raise ConfigError("the monitor is already running in this process")
        specs = select_hosts(await self.context.hosts.refresh(), pattern)
        if not specs:
            raise ConfigError(f"no host matches {pattern!r}" if pattern else (
                "no hosts to monitor: the inventory lists none and none are adopted "
                "(add hosts to the inventory, or `fleet adopt` a discovered one)"))
        monitor = Monitor(
            specs,
            self.context.database,
            self.context.ssh_options,
            settings or self.monitor_settings(),
            on_summary=on_summary,
            housekeeping=self._housekeeping,
        )
        self._monitor, self._pattern = monitor, pattern
        self._stored_unmanaged = None
        try:
            await monitor.start()
        except BaseException:
            self._monitor = None
            await monitor.stop()
            raise
        self.context.connections = monitor.pool  # tasks start and stream over these
        return monitor

    async def stop_monitor(self) -> None:
        """Stop the in-process monitor: probes exit, buffered samples are written."""
        monitor, self._monitor = self._monitor, None
        self.context.connections = None
        self._started_by_watch = False
        self._watchers = 0
        if monitor is not None:
            await monitor.stop()

    def snapshot(self) -> FleetSnapshot | None:
        """The monitor's newest snapshot (None when no monitor runs or nothing is seen yet)."""
        return self._monitor.snapshot() if self._monitor is not None else None

    async def refresh_drains(self) -> None:
        """Show the stored drain flags in the running monitor's snapshots now (if one runs)."""
        if self._monitor is not None:
            await self._monitor.refresh_drains()

    async def watch(self, pattern: str | None = None, *,
                    settings: Settings | None = None) -> AsyncGenerator[FleetSnapshot, None]:
        """The newest snapshot, then every change (coalesced for slow readers).

        Starts the monitor in this process (with `settings`, default the effective ones) if
        none runs; a monitor started this way stops when the last watch() using it ends.
        `pattern` narrows the managed hosts shown (and monitored, when this call starts it).
        """
        from fleet.inventory import select_hosts

        names = frozenset(spec.name for spec in
                          select_hosts(await self.context.hosts.refresh(), pattern))
        if self._monitor is None:
            await self.start_monitor(pattern, settings=settings)
            self._started_by_watch = True
        monitor = self._monitor
        assert monitor is not None
        owned = self._started_by_watch
        if owned:
            self._watchers += 1
        updates = monitor.subscribe(names if pattern else None)
        try:
            async for snapshot in updates:
                yield snapshot
        finally:
            with contextlib.suppress(RuntimeError):
                await updates.aclose()
            if owned and self._monitor is monitor:
                self._watchers -= 1
                if self._watchers <= 0:
                    await self.stop_monitor()


def _stored_form(processes: tuple[ProcessInfo, ...]) -> tuple[dict[str, Any], ...]:
    """What the database keeps of a GPU's unmanaged processes (their memory, which changes
    with every sample, is not kept, so it does not make a GPU changed)."""
    return tuple({"pid": p.pid, "name": p.name, "uid": p.uid, "user": p.user}
                 for p in processes)


def _store_unmanaged(session: Session, changed: dict[tuple[str, int], StoredProcesses]
                     ) -> dict[tuple[str, int], StoredProcesses]:
    """Store each changed GPU's unmanaged processes; those the database knew the GPU of."""
    from db.unmanaged import store_unmanaged

    written = store_unmanaged(session, changed)
    return {key: processes for key, processes in changed.items() if key in written}
