"""The Monitor: one loop per host, batched recording, the live snapshot, per-interval summaries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from msgspec.structs import replace

from fleet.errors import StorageError
from fleet.health.hooks import HookRunner
from fleet.health.metrics import MetricFamily
from fleet.health.rules import HealthTracker
from fleet.health.unmanaged import UnmanagedWatch
from fleet.health.webhook_feed import WebhookFeed
from fleet.model import HostOutcome, HostSpec
from fleet.monitor.batch import HostOutcomeIn
from fleet.monitor.events_made import clock_skew_event, hook_failed_event
from fleet.monitor.flush_queries import Drains
from fleet.monitor.local import LocalStream
from fleet.monitor.overlay import NO_EXTRAS, GpuOverlay, with_extras
from fleet.monitor.publisher import SnapshotPublisher
from fleet.monitor.snapshots import SnapshotHub
from fleet.monitor.stream import HostStream, StreamStats
from fleet.monitor.summary import MonitorSummary, SummaryCallback, summarize
from fleet.monitor.thread_work import finish_in_thread
from fleet.monitor.writer import SampleWriter
from fleet.reports import ProbeReport
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot
from fleet.ssh.pool import ConnectionPool
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.engine import Database
    from fleet.monitor.config import Settings
    from fleet.ssh.options import SshOptions

log = logging.getLogger("fleet.monitor")

# Seconds between housekeeping passes (reservation expiry, allocations, task reconciliation).
HOUSEKEEPING_INTERVAL_S = 5.0


# Periodic bookkeeping the service layer plugs in; it receives the monitor to update.
Housekeeping = Callable[["Monitor"], Awaitable[None]]


class Monitor:
    """Watches `specs` continuously until stop(); see the module docstrings of fleet.monitor."""

    def __init__(
        self,
        specs: Sequence[HostSpec],
        database: Database,
        ssh_options: SshOptions,
        settings: Settings,
        *,
        on_summary: SummaryCallback | None = None,
        housekeeping: Housekeeping | None = None,
    ) -> None:
        self.specs = tuple(specs)
        self.housekeeping = housekeeping
        self._allocations: dict[tuple[str, int], AllocationInfo] = {}
        self._applied_drains = Drains()  # what _apply_drains last put on the snapshots
        self.settings = settings
        self.unmanaged = UnmanagedWatch()  # processes fleet did not start (housekeeping)
        self._overlay = GpuOverlay(self.unmanaged)
        self.options = settings.ssh.apply(ssh_options)
        self.pool = ConnectionPool(self.options, settings.monitor.max_handshakes)
        self.writer = SampleWriter(database, settings.monitor.flush_rows,
                                   host_down_after=settings.health.host_down_after)
        self.on_summary = on_summary
        self.samples_written = 0
        self._hosts: dict[str, HostSnapshot] = {
            spec.name: HostSnapshot(spec=spec, state="unknown") for spec in self.specs
        }
        self.publisher = SnapshotPublisher(self._hosts.values, self._hosts)
        self._streams: dict[str, HostStream | LocalStream] = {}
        self._host_tasks: dict[str, asyncio.Task[None]] = {}
        self._service_tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._written_since_summary = 0
        # The last failure of each host failing now (cleared by its next good reading).
        self._failing: dict[str, tuple[HostOutcome, str]] = {}
        self.health = HealthTracker(settings.health)
        self.hooks: HookRunner | None = None
        self.webhooks: WebhookFeed | None = None  # with `hooks.webhooks` configured
        self.retention_passes = 0
        self.housekeeping_passes = 0

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._running

    def stream_stats(self) -> dict[str, StreamStats]:
        """Each host's loop counters."""
        return {name: stream.stats for name, stream in self._streams.items()}

    async def start(self) -> None:
        """Register the hosts, start one loop per host and the writer, publisher and summary."""
        if self._running:
            return
        for seed in await self.writer.register_hosts(list(self.specs)):
            self.health.seed(seed)
        if self.settings.hooks.webhooks:  # first: its start reads the database, and may fail
            self.webhooks = WebhookFeed(self.writer.database, self.settings.hooks,
                                        on_failure=self._hook_failed)
            await self.webhooks.start()
        self.hooks = HookRunner(self.settings.hooks, on_failure=self._hook_failed)
        self._running = True
        for spec in self.specs:
            self._start_stream(spec)
        self._service_tasks = [
            asyncio.create_task(self._flush_loop(), name="monitor flush"),
            asyncio.create_task(self.publisher.run(), name="monitor publish"),
            asyncio.create_task(self._interval_loop(), name="monitor interval"),
            asyncio.create_task(self._retention_loop(), name="monitor retention"),
        ]
        if self.housekeeping is not None:
            self._service_tasks.append(
                asyncio.create_task(self._housekeeping_loop(), name="monitor housekeeping"))
        self.publisher.publish()

    async def add_hosts(self, specs: Sequence[HostSpec]) -> tuple[HostSpec, ...]:
        """Also watch those of `specs` not watched yet (hosts adopted while it runs); returns
        them. A no-op once stop() began."""
        new = tuple(spec for spec in specs if spec.name not in self._hosts)
        if not new or not self._running:
            return ()
        seeds = await self.writer.register_hosts(list(new))
        if not self._running:
            return ()
        for seed in seeds:
            self.health.seed(seed)
        self.specs = (*self.specs, *new)
        for spec in new:
            self._update(HostSnapshot(spec=spec, state="unknown"))
            self._start_stream(spec)
        log.info("now also monitoring %s", ", ".join(spec.name for spec in new))
        return new

    def _start_stream(self, spec: HostSpec) -> None:
        stream: HostStream | LocalStream
        if spec.connection == "local":
            stream = LocalStream(spec, self.settings.monitor, self)
        else:
            stream = HostStream(spec, self.pool, self.settings.monitor, self)
        self._streams[spec.name] = stream
        self._host_tasks[spec.name] = asyncio.create_task(stream.run(), name=f"monitor {spec.name}")

    async def stop(self) -> None:
        """Stop every probe (stdin closed, then killed by pid if it lingers), flush, close."""
        if not self._running:
            return
        self._running = False
        await asyncio.gather(*(stream.stop() for stream in self._streams.values()))
        tasks = list(self._host_tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.monitor.stop_grace)
            lingering = [name for name, task in self._host_tasks.items() if task in pending]
            if lingering:
                log.warning("probes of %s did not exit in time: killing them", lingering)
                await asyncio.gather(
                    *(self._streams[name].kill_remote_probe() for name in lingering)
                )
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending, timeout=self.options.command_timeout)
        for task in self._service_tasks:
            task.cancel()
        for task in self._service_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        written = await self.writer.flush()  # not `count += await`: see _flush_loop
        self._written_since_summary += written
        self.samples_written = self.writer.stats.gpu_samples
        self._submit_hooks()
        self._sync_host_states()
        await self.pool.close()
        if self.hooks is not None:
            await self.hooks.close()
        if self.webhooks is not None:
            await self.webhooks.close()
        written = await self.writer.flush()  # failures of the last hooks and webhooks are
        self._written_since_summary += written  # events too
        self.publisher.close()

    @property
    def hub(self) -> SnapshotHub:
        """Where the snapshots are published (fleet.monitor.publisher)."""
        return self.publisher.hub

    def snapshot(self) -> FleetSnapshot | None:
        """The newest snapshot (made now if changes were held back: nobody subscribed)."""
        return self.publisher.latest()

    def subscribe(self, names: frozenset[str] | None = None) -> AsyncGenerator[FleetSnapshot, None]:
        """Snapshots as they change (coalesced), optionally only the hosts in `names`."""
        return self.publisher.subscribe(names)

    # ---- HostSink: called by the host loops on the event loop ----

    def on_report(self, spec: HostSpec, report: ProbeReport) -> None:
        """A good reading of `spec`: buffer it, apply the health rules, update its snapshot."""
        name = spec.name
        previous = self._hosts[name]
        now = time.time()
        self._failing.pop(name, None)
        self.writer.add_report(name, report)
        if previous.report is None or previous.state != "up":
            # Its first reading (record its GPUs now, so that a claim right after start can
            # name them) or a recovery: written at once, not at the next flush interval.
            self.writer.due.set()
        self.writer.add_health_changes(self.health.observe(name, "up", None, report, now), now)
        self.writer.add_host_outcome(HostOutcomeIn(name, "up", None, 0, now))
        drains = self.writer.drains
        states = self.health.gpu_states(name)
        extras = self._overlay.of_host(drains, self._allocations, name)
        gpus = tuple(  # positional: GpuSnapshot(host, index, reading, state, *extras)
            GpuSnapshot(name, gpu.index, gpu, states.get(gpu.index, "ok")) for gpu in report.gpus
        ) if extras is None else tuple(
            GpuSnapshot(name, gpu.index, gpu, states.get(gpu.index, "ok"),
                        *extras.get(gpu.index, NO_EXTRAS))
            for gpu in report.gpus
        )
        self._update(
            HostSnapshot(  # every field given: cheaper than dataclasses.replace, once per reading
                spec=previous.spec, state="up", reason=None, report=report, last_seen=now,
                drained=name in drains.hosts, drain_reason=drains.hosts.get(name), gpus=gpus,
            )
        )

    def on_failure(self, spec: HostSpec, outcome: HostOutcome, reason: str) -> None:
        """`spec` could not be read: keep its last report and show why; the next interval
        counts the failure (see _observe_failures)."""
        name = spec.name
        log.info("%s: %s: %s", name, outcome, reason)
        self._failing[name] = (outcome, reason)
        self._update(replace(self._hosts[name], reason=f"{outcome}: {reason}"))

    def on_clock_skew(self, spec: HostSpec, offset: float, skewed: bool) -> None:
        """`spec`'s clock went beyond fleet.monitor.clock's tolerance, or came back within it:
        a `clock_skew` event."""
        self.writer.add_event(clock_skew_event(spec.name, offset, skewed, time.time()))

    def _observe_failures(self) -> None:
        """Once per interval, count one failed outcome for every failing host and record it.

        The state follows fleet.health.host_state's rule: unchanged until host_down_after
        consecutive failures, then "down" (unreachable) or the failure's own word.
        """
        now = time.time()
        for name, (outcome, reason) in list(self._failing.items()):
            self.health.observe(name, outcome, reason, None, now)
            self.writer.add_host_outcome(
                HostOutcomeIn(name, outcome, reason, self.health.failures(name), now))
            host = self._hosts[name]
            state = self.health.host_state(name) or host.state
            if state != host.state:  # the rule decided: written at once, with its event
                self.writer.due.set()
                self._update(replace(host, state=state))

    def _sync_host_states(self) -> None:
        """Show (and track) each host's state as the last flush stored it."""
        for name, state in self.writer.take_stored_states().items():
            self.health.sync_host_state(name, state)
            host = self._hosts.get(name)
            if host is not None and host.state != state:
                self._update(replace(host, state=state))

    def _hook_failed(self, failure: dict[str, object]) -> None:
        """A hook run or webhook delivery failed: record it as an event (hook_failed,
        webhook_failed), which no hook command runs for (webhooks: see Webhook.wants)."""
        self.writer.add_event(hook_failed_event(failure, time.time()))

    def _submit_hooks(self) -> None:
        for event in self.writer.take_applied_events():
            if self.hooks is not None:
                self.hooks.submit(event)

    def _update(self, host: HostSnapshot) -> None:
        self._hosts[host.spec.name] = host
        self.publisher.changed(host.spec.name)

    # ---- background loops ----

    async def _flush_loop(self) -> None:
        interval = self.settings.monitor.flush_interval
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
            # lands as the buffer fills (its inner wait already done), and stop() then hangs.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.writer.due.wait()
            # Not `count += await flush()`: it would undo a summary's reset made meanwhile.
            written = await self.writer.flush()
            self._written_since_summary += written
            self.samples_written = self.writer.stats.gpu_samples
            self._submit_hooks()
            self._sync_host_states()
            if self.writer.drains != self._applied_drains:  # new readings carry them already
                self._apply_drains()

    def writer_metrics(self) -> list[MetricFamily]:
        """The monitor's own metrics: what it wrote, refused or let go, and unmanaged use."""
        from fleet.monitor.metrics import monitor_metrics

        return monitor_metrics(self.writer, self.unmanaged)

    def set_allocations(self, allocations: dict[tuple[str, int], AllocationInfo]) -> None:
        """Who holds each GPU, keyed by (host, index); shown in the snapshots from now on (with
        the processes fleet did not start, as `self.unmanaged` last judged them)."""
        self._allocations = dict(allocations)
        self._apply_drains()

    async def refresh_drains(self) -> None:
        """Read the drain flags now and show them (a drain set through this process's services,
        which places work from these snapshots, must not wait for the next flush)."""
        await self.writer.refresh_drains()
        if self.writer.drains != self._applied_drains:
            self._apply_drains()

    def _apply_drains(self) -> None:
        """Put the stored drain flags, the current allocations and unmanaged use on every GPU
        snapshot (on_report builds a new reading's snapshots with them already)."""
        drains = self._applied_drains = self.writer.drains
        for name, host in list(self._hosts.items()):
            extras = self._overlay.of_host(drains, self._allocations, name) or {}
            gpus = tuple(with_extras(gpu, extras.get(gpu.index, NO_EXTRAS)) for gpu in host.gpus)
            drained, drain_reason = name in drains.hosts, drains.hosts.get(name)
            if (drained, drain_reason) != (host.drained, host.drain_reason) or any(
                    new is not old for new, old in zip(gpus, host.gpus, strict=True)):
                self._update(replace(host, drained=drained, drain_reason=drain_reason, gpus=gpus))

    async def _interval_loop(self) -> None:
        interval = self.settings.monitor.interval
        while True:
            await asyncio.sleep(interval)
            self._observe_failures()
            if self.on_summary is not None:
                self.on_summary(self.summary())
                self._written_since_summary = 0

    async def _retention_loop(self) -> None:
        """Roll up and prune samples every retention.interval_s (first pass at start)."""
        from fleet.health.retention import apply_retention

        settings = self.settings.retention

        database = self.writer.database

        def one_pass() -> None:
            with storage_errors("apply retention", database.url), database.session() as session:
                result = apply_retention(session, settings, time.time())
            log.info("retention: %s", result)

        while True:
            try:
                await finish_in_thread(one_pass)  # stop closes the pool after it, not during
                self.retention_passes += 1
            except StorageError as exc:
                log.error("retention pass failed: %s", exc)
            await asyncio.sleep(settings.interval_s)

    async def _housekeeping_loop(self) -> None:
        """Run the service's housekeeping every HOUSEKEEPING_INTERVAL_S; failures are logged.

        The services map database errors to StorageError (a FleetError) at their edge.
        """
        from fleet.errors import FleetError

        assert self.housekeeping is not None
        while True:
            try:
                await self.housekeeping(self)
            except (FleetError, OSError) as exc:
                log.error("housekeeping pass failed: %s", exc)
            self.housekeeping_passes += 1
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)

    def summary(self) -> MonitorSummary:
        """Counts over the current host states (samples written since the last summary)."""
        return summarize(self._hosts.values(), self._written_since_summary,
                         buffered=self.writer.buffered_rows,
                         failed_flushes=self.writer.stats.failed_flushes,
                         readings_dropped=self.writer.stats.dropped_reports,
                         events_dropped=self.writer.stats.dropped_events)
