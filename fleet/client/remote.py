"""RemoteFleet: the `Fleet` methods that `fleet serve` offers, with the same names and types."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.client.remote_tasks import RemoteSubmissions
from fleet.client.transport import Transport
from fleet.wire import drain, events, tasks
from fleet.wire.codec import decode
from fleet.wire.identity import WhoAmI

# The snapshot, host and allocation wire modules (~16 ms of imports together, fleet.snapshot
# and fleet.model's dataclasses) load in the methods that use them: `fleet dispatch` needs none.

if TYPE_CHECKING:
    from fleet.dispatch.ending import ReconcileReport
    from fleet.fanout import HostStatus, ProgressCallback
    from fleet.health.drain import DrainOutcome
    from fleet.model import HostSpec
    from fleet.monitor.config import Settings
    from fleet.placement.claim import Claim
    from fleet.placement.request import PlacementRequest
    from fleet.records import (
        AllocationDetail,
        EventView,
        GpuHistoryPoint,
        HostHistoryPoint,
        HostRow,
        Severity,
        TaskRow,
        UnmanagedGpu,
    )
    from fleet.services.usage import UsageReport
    from fleet.snapshot import FleetSnapshot
    from fleet.wire.dispatch import PlaceReport

CANCEL_MARGIN_S = 30.0  # on top of the grace period, for the server to reach the host


class RemoteFleet(RemoteSubmissions):
    """A `fleet serve` session; create it with `open_remote(socket_path)`.

        async with open_remote(Path("/run/fleet/fleet.sock")) as f:
            for row in await f.tasks(states=["running"]):
                print(row.id, row.owner, row.host)

    Replies are decoded into the engine's own dataclasses and error structs are raised as the same
    FleetError subclasses, so callers (the CLI first) cannot tell the modes apart. Who is calling
    is the server's business (the socket's peer credentials): owner arguments are not sent.
    """

    remote = True  # `Fleet.remote` is False

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._latest: FleetSnapshot | None = None

    @property
    def socket_path(self) -> Path:
        """The server's socket."""
        return self.transport.socket_path

    # ---- live view ----

    async def live_snapshot(self, pattern: str | None = None) -> FleetSnapshot:
        """The server monitor's latest snapshot (of the hosts matching `pattern`)."""
        from fleet.wire.snapshot import SnapshotWire, snapshot_from_wire

        wire = await self.transport.get("status", SnapshotWire, {"hosts": pattern})
        self._latest = snapshot_from_wire(wire)
        return self._latest

    def snapshot(self) -> FleetSnapshot | None:
        """The newest snapshot this client received (by live_snapshot, status or watch)."""
        return self._latest

    async def status(self, pattern: str | None = None, *, timeout: float = 15.0,
                     record: bool = True, fanout: int = 128,
                     progress: ProgressCallback | None = None) -> list[HostStatus]:
        """Every selected host as the server's monitor last saw it (no new probe: the
        server probes continuously and records what it sees, so `record` and `fanout` have
        nothing to do here)."""
        from fleet.client.status import statuses_from_snapshot

        statuses = statuses_from_snapshot(await self.live_snapshot(pattern))
        if progress is not None:
            for done, status in enumerate(statuses, start=1):
                progress(status, done, len(statuses))
        return statuses

    async def watch(self, pattern: str | None = None, *, settings: Settings | None = None
                    ) -> AsyncGenerator[FleetSnapshot, None]:
        """The latest snapshot, then every change, streamed by the server (whose monitor runs
        with its own settings: `settings` is not used)."""
        from fleet.wire.snapshot import SnapshotWire, snapshot_from_wire

        async with aclosing(self.transport.events("watch", {"hosts": pattern})) as stream:
            async for event, data in stream:
                if event == "snapshot":
                    self._latest = snapshot_from_wire(decode(data, SnapshotWire))
                    yield self._latest

    async def whoami(self) -> WhoAmI:
        """Who the server sees at this end of the socket."""
        return await self.transport.get("whoami", WhoAmI)

    # ---- stored data ----

    async def registered_hosts(self) -> list[HostRow]:
        """Every host the server's database knows."""
        from fleet.wire import hosts

        return hosts.hosts_from_wire(await self.transport.get("hosts", hosts.HostList))

    async def managed_hosts(self, pattern: str | None = None) -> tuple[HostSpec, ...]:
        """The server's managed hosts matching `pattern` (ConfigError for a typo)."""
        from fleet.wire import hosts

        reply = await self.transport.get("managed", hosts.ManagedList, {"hosts": pattern})
        return hosts.managed_from_wire(reply)

    async def tasks(self, *, states: Sequence[str] | None = None, limit: int | None = None,
                    since: int | None = None) -> list[TaskRow]:
        """Tasks, oldest first (as `Fleet.tasks`)."""
        reply = await self.transport.get("tasks", tasks.TaskList, {
            "states": list(states or ()), "limit": limit, "since": since})
        return tasks.tasks_from_wire(reply)

    async def members(self, group_id: int) -> list[TaskRow]:
        """A gang's or array's tasks, by rank or index (as `Fleet.members`)."""
        reply = await self.transport.get("tasks", tasks.TaskList, {"group": group_id})
        return tasks.tasks_from_wire(reply)

    async def task(self, task_id: int) -> TaskRow:
        """One task; ConfigError (exit 2) if there is none."""
        return tasks.task_from_wire(await self.transport.get(f"tasks/{task_id}", tasks.TaskWire))

    async def reconcile_tasks(self, *, lost_after_s: float | None = None,
                              check_timeout_s: float | None = None) -> ReconcileReport:
        """Ask the server to check running tasks now (with its own limits)."""
        from fleet.dispatch.ending import ReconcileReport

        reply = await self.transport.post("tasks/reconcile", {}, tasks.ReconcileResult)
        return ReconcileReport(dict(reply.ended), list(reply.still_running),
                               dict(reply.unreachable))

    async def events(self, *, since: float | None = None, until: float | None = None,
                     severity: Severity | None = None, host: str | None = None,
                     kind: str | None = None, limit: int | None = 100,
                     newest_first: bool = False) -> list[EventView]:
        """Events matching every filter (as `Fleet.events`)."""
        reply = await self.transport.get("events", events.EventList, {
            "since": since, "until": until, "severity": severity, "host": host, "kind": kind,
            "limit": "null" if limit is None else limit,  # no limit, not the default 100
            "newest_first": newest_first})
        return events.events_from_wire(reply)

    async def usage(self, *, since: float, until: float | None = None,
                    by: str = "user") -> UsageReport:
        """Usage per user, group, host or GPU model (as `Fleet.usage`)."""
        from fleet.wire import usage

        reply = await self.transport.get("usage", usage.UsageReply,
                                         {"since": since, "until": until, "by": by})
        return usage.usage_from_wire(reply)

    async def unmanaged_use(self) -> list[UnmanagedGpu]:
        """GPUs running processes fleet did not start (as `Fleet.unmanaged_use`)."""
        from fleet.wire import allocations

        return allocations.unmanaged_from_wire(
            await self.transport.get("unmanaged", allocations.UnmanagedList))

    async def allocations(self, active_only: bool = True) -> list[AllocationDetail]:
        """Who holds which GPU (active only by default)."""
        from fleet.wire import allocations

        reply = await self.transport.get("allocations", allocations.AllocationList,
                                         {"active_only": active_only})
        return allocations.allocations_from_wire(reply)

    # ---- actions (the server checks the caller's permission) ----

    async def cancel(self, task_id: int, *, grace_s: float = 10.0) -> TaskRow:
        """Cancel a task (your own, or anyone's as an admin)."""
        reply = await self.transport.post(f"tasks/{task_id}/cancel",
                                          tasks.CancelRequest(grace_s=grace_s), tasks.TaskWire,
                                          timeout_s=grace_s + CANCEL_MARGIN_S)
        return tasks.task_from_wire(reply)

    async def release(self, allocation_ids: Sequence[int], *, force: bool = False) -> list[int]:
        """Release allocations by id (your own, or anyone's as an admin)."""
        from fleet.wire import allocations

        reply = await self.transport.post(
            "allocations/release",
            allocations.ReleaseRequest(ids=tuple(allocation_ids), force=force),
            allocations.ReleaseResult)
        return list(reply.released)

    async def release_mine(self, owner: str | None = None) -> list[int]:
        """Release every reservation you hold (the server knows who you are: `owner` is
        not sent)."""
        from fleet.wire import allocations

        reply = await self.transport.post("allocations/release",
                                          allocations.ReleaseRequest(all_mine=True),
                                          allocations.ReleaseResult)
        return list(reply.released)

    async def reserve(self, request: PlacementRequest, *, duration_s: float | None = None,
                      note: str | None = None, owner: str | None = None) -> Claim:
        """Hold GPUs; the owner is your Unix user (`owner` is not sent)."""
        from fleet.wire import allocations

        reply = await self.transport.post(
            "reservations", allocations.ReserveRequest(request.to_dict(), duration_s, note),
            allocations.ClaimWire)
        return allocations.claim_from_wire(reply)

    async def reserve_gpus(self, host: str, gpu_indices: Sequence[int], *,
                           duration_s: float | None = None, note: str | None = None,
                           owner: str | None = None) -> Claim:
        """Hold exactly these GPUs of `host` (all or none); the owner is your Unix user."""
        from fleet.wire import allocations

        reply = await self.transport.post(
            "reservations/gpus",
            allocations.ReserveGpusRequest(host, tuple(gpu_indices), duration_s, note),
            allocations.ClaimWire)
        return allocations.claim_from_wire(reply)

    async def gpu_history(self, *, since: float, until: float, host: str | None = None,
                          gpu: str | None = None, bucket_s: int | None = None,
                          limit: int | None = None) -> list[GpuHistoryPoint]:
        """GPU samples or buckets between two epoch times (as `Fleet.gpu_history`)."""
        from fleet.wire import history

        reply = await self.transport.get("history/gpu", history.GpuHistoryList, {
            "since": since, "until": until, "host": host, "gpu": gpu, "bucket_s": bucket_s,
            "limit": limit})
        return history.history_from_wire(reply)

    async def host_history(self, *, since: float, until: float, host: str | None = None,
                           bucket_s: int | None = None,
                           limit: int | None = None) -> list[HostHistoryPoint]:
        """Host samples or buckets between two epoch times (as `Fleet.host_history`)."""
        from fleet.wire import history

        reply = await self.transport.get("history/host", history.HostHistoryList, {
            "since": since, "until": until, "host": host, "bucket_s": bucket_s,
            "limit": limit})
        return history.host_history_from_wire(reply)

    async def drain(self, target: str, reason: str | None = None, *,
                    by: str | None = None) -> DrainOutcome:
        """Drain a host or GPU (admins only); the event names you, not `by`."""
        reply = await self.transport.post("drain", drain.DrainRequest(target, reason),
                                          drain.DrainResult)
        return drain.drain_from_wire(reply)

    async def undrain(self, target: str, *, by: str | None = None) -> DrainOutcome:
        """Undrain a host or GPU (admins only)."""
        reply = await self.transport.post("undrain", drain.UndrainRequest(target),
                                          drain.DrainResult)
        return drain.drain_from_wire(reply)

    async def place_report(self, request: PlacementRequest) -> PlaceReport:
        """Where the server would place `request` now, explained (nothing is claimed)."""
        from fleet.wire.dispatch import PlaceReport, PlaceRequest

        return await self.transport.post("place", PlaceRequest(request.to_dict()), PlaceReport)

    async def stop_monitor(self) -> None:
        """Nothing to stop: the monitor is the server's."""

    async def close(self) -> None:
        """Close the connection to the server."""
        await self.transport.close()


@asynccontextmanager
async def open_remote(socket_path: Path) -> AsyncIterator[RemoteFleet]:
    """A RemoteFleet on `socket_path`, closed at the end of the block."""
    remote = RemoteFleet(Transport(socket_path))
    try:
        yield remote
    finally:
        await remote.close()
