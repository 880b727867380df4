"""The real `FleetService`: the TUI's protocol mapped onto `fleet.Fleet`, or onto a
`fleet serve` (`RemoteFleet`: the lab's shared view, one monitor for every TUI)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from fleet.errors import ConfigError
from fleet.snapshot import FleetSnapshot
from tui.service import (
    AllocationView,
    CandidateView,
    DiscoveryScope,
    DispatchRequest,
    EventView,
    GpuHistory,
    HistoryPoint,
    HostKeyFingerprint,
    PlacementPreview,
    TaskView,
    UserUsageView,
)

if TYPE_CHECKING:
    from fleet import Fleet
    from fleet.client.session import Service
    from fleet.discovery.candidates import CandidateView as FoundHost
    from fleet.monitor.config import Settings
    from fleet.placement.request import PlacementRequest
    from fleet.records import TaskRow
    from fleet.wire.dispatch import PlaceReport

HISTORY_POINTS = 120  # plot resolution: the window is bucketed into about this many points
TASK_LIMIT = 300  # newest tasks listed
LOG_STOP_S = 5.0  # how long a stopped log follower may take to close its channel
SCAN_S = 3.0  # one discovery browse from the Discovery screen
PREVIEW_EXCLUSIONS = 40  # exclusion lines handed to the dispatch dialog


class FleetAdapter:
    """FleetService over a live `Fleet` or a `fleet serve` session.

    `scripts` are offered in the dispatch dialog; `hosts` narrows the live view (a `--hosts`
    pattern); `settings` are the monitor's when watch() has to start one in this process.
    Through a server, discovery and adoption stay on the head node (ConfigError here).
    """

    def __init__(self, fleet: Service, *, scripts: Sequence[str] = (), owner: str | None = None,
                 hosts: str | None = None, settings: Settings | None = None) -> None:
        self.fleet = fleet
        self.scripts = list(scripts)
        self.owner = owner
        self.hosts = hosts
        self.settings = settings

    async def watch(self) -> AsyncIterator[FleetSnapshot]:
        # aclosing: closing this generator closes fleet's too, which stops a monitor it started
        async with contextlib.aclosing(self.fleet.watch(self.hosts,
                                                        settings=self.settings)) as updates:
            async for snapshot in updates:
                yield snapshot

    async def gpu_history(self, host: str, since: float, until: float) -> list[GpuHistory]:
        bucket = max(1, int((until - since) / HISTORY_POINTS))
        points = await self.fleet.gpu_history(since=since, until=until, host=host,
                                              bucket_s=bucket)
        by_gpu: dict[int, list[HistoryPoint]] = {}
        for point in points:
            by_gpu.setdefault(point.gpu_idx, []).append(HistoryPoint(
                point.ts_ms / 1000, point.util_avg, point.mem_used_avg, point.temp_avg,
                point.power_avg))
        return [GpuHistory(host, index, tuple(sorted(series, key=lambda p: p.ts)))
                for index, series in sorted(by_gpu.items())]

    async def tasks(self) -> list[TaskView]:
        rows = await self.fleet.tasks(limit=TASK_LIMIT)  # oldest first
        return [task_view(row) for row in reversed(rows)]

    async def log_tail(self, task_id: int) -> AsyncIterator[str]:
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        stop = asyncio.Event()

        async def run() -> None:
            try:
                await self.fleet.follow(task_id, on_output=chunks.put_nowait, stop=stop,
                                        follow=True)
            finally:
                chunks.put_nowait(None)

        follower = asyncio.create_task(run())
        pending = ""
        try:
            while (chunk := await chunks.get()) is not None:
                pending += chunk.decode(errors="replace")
                *lines, pending = pending.split("\n")
                for line in lines:
                    yield line
            if pending:
                yield pending
            await follower  # raises the follower's FleetError, if any
        finally:
            stop.set()
            if not follower.done():
                await asyncio.wait({follower}, timeout=LOG_STOP_S)
                follower.cancel()

    async def cancel(self, task_id: int) -> None:
        await self.fleet.cancel(task_id)

    async def events(self, limit: int = 500, *, host: str | None = None) -> list[EventView]:
        rows = await self.fleet.events(limit=limit, host=host, newest_first=True)
        return [EventView(row.id, float(row.ts), row.severity, row.kind, row.message, row.host,
                          row.gpu_idx, row.task_id) for row in rows]

    async def allocations(self) -> list[AllocationView]:
        return [AllocationView(a.id, a.kind, a.owner, a.host, a.gpu_idx, a.created_at,
                               a.task_id, a.expires_at, a.note, a.idle_since)
                for a in await self.fleet.allocations()]

    async def usage(self, since: float) -> list[UserUsageView]:
        report = await self.fleet.usage(since=since, by="user")
        return [UserUsageView(row.key, row.gpu_hours, row.busy_gpu_hours, row.efficiency,
                              row.tasks, row.failures) for row in report.rows]

    async def reserve(self, host: str, gpu_indices: Sequence[int], duration_s: float | None,
                      note: str | None) -> list[AllocationView]:
        made = await self.fleet.reserve_gpus(host, gpu_indices, duration_s=duration_s,
                                             note=note, owner=self.owner)
        return [AllocationView(allocation_id, made.kind, made.owner, host, index,
                               made.created_at, None, made.expires_at, made.note)
                for allocation_id, index in zip(made.allocation_ids, made.gpu_indices,
                                                strict=True)]

    async def release(self, allocation_id: int) -> None:
        await self.fleet.release([allocation_id])

    async def drain(self, host: str, gpu_index: int | None, reason: str) -> None:
        await self.fleet.drain(_target(host, gpu_index), reason, by=self.owner)

    async def undrain(self, host: str, gpu_index: int | None) -> None:
        await self.fleet.undrain(_target(host, gpu_index), by=self.owner)

    def _local(self, what: str) -> Fleet:
        """The local Fleet; through a server, ConfigError: `what` runs on the head node."""
        if self.fleet.remote:
            raise ConfigError(f"{what} runs where fleet serve runs: use `fleet discover` and "
                              "`fleet adopt` on the head node (adopting needs an admin)")
        return cast("Fleet", self.fleet)

    async def candidates(self) -> list[CandidateView]:
        fleet = self._local("discovery")
        return [_candidate_view(view) for view in await fleet.discovered_hosts()]

    async def scan(self) -> list[CandidateView]:
        outcome = await self._local("discovery").discover(timeout=SCAN_S)
        return [_candidate_view(view) for view in outcome.views]

    async def discovery_scope(self) -> DiscoveryScope:
        fleet = self._local("discovery")
        settings = await asyncio.to_thread(fleet.discovery_settings)  # may read the inventory
        return DiscoveryScope(tuple(settings.service_types), tuple(settings.interfaces))

    async def host_key(self, candidate_key: str) -> HostKeyFingerprint:
        from fleet.model import HostSpec
        from fleet.ssh.connect import fetch_host_key

        address, port = _split_key(candidate_key)
        spec = HostSpec(name=address, address=address, port=port)
        options = self._local("adopting a host").ssh_options
        key_type, fingerprint = await fetch_host_key(spec, options)
        return HostKeyFingerprint(key_type, fingerprint)

    async def adopt(self, candidate_key: str, fingerprint: HostKeyFingerprint) -> str:
        result = await self._local("adopting a host").adopt(
            candidate_key, expected_fingerprint=fingerprint.sha256)
        return result.name

    async def preview(self, request: DispatchRequest) -> PlacementPreview:
        placement = _placement_request(request)
        if self.fleet.remote:
            from fleet.client.remote import RemoteFleet

            assert isinstance(self.fleet, RemoteFleet)
            return placement_preview(await self.fleet.place_report(placement))
        from fleet.render.explain import place_report

        return placement_preview(place_report(await cast("Fleet", self.fleet).place(placement)))

    async def dispatch(self, request: DispatchRequest) -> TaskView:
        from fleet.dispatch.request import DispatchRequest as FleetDispatchRequest

        started = await self.fleet.submit(FleetDispatchRequest(
            script=Path(request.script), placement=_placement_request(request),
            args=request.args, name=request.name, owner=self.owner))
        return task_view(await self.fleet.task(started.task_id))

    def suggested_scripts(self) -> list[str]:
        return list(self.scripts)


def placement_preview(report: PlaceReport) -> PlacementPreview:
    """The dialog's view of a placement: the eligible GPUs, best first, and every exclusion."""
    data = report.data
    eligible = tuple(
        f"{'*' if item['chosen'] else ' '} {item['host']}:{item['index']}  score "
        f"{item['score']:.2f}  {item['model'] or 'GPU'}" for item in data["candidates"])
    found = data["exclusions"]
    exclusions = tuple(
        f"{_target(e['host'], e['index'])}: {'; '.join(e['reasons'])}"
        for e in found[:PREVIEW_EXCLUSIONS])
    if len(found) > PREVIEW_EXCLUSIONS:
        exclusions += (f"… and {len(found) - PREVIEW_EXCLUSIONS} more",)
    indices = tuple(gpu["index"] for gpu in data["gpus"])
    return PlacementPreview(report.host is not None, report.host, indices, eligible, exclusions)


def task_view(row: TaskRow) -> TaskView:
    """The tasks screen's view of a stored task."""
    return TaskView(
        task_id=row.id, name=row.name, state=row.state, owner=row.owner, host=row.host,
        gpus=tuple(gpu.idx for gpu in row.gpus), submitted_at=float(row.submitted_at),
        started_at=_optional_float(row.started_at), ended_at=_optional_float(row.ended_at),
        exit_code=row.exit_code, error=row.error)


def _candidate_view(view: FoundHost) -> CandidateView:
    return CandidateView(
        key=f"{view.address}:{view.ssh_port}", name=view.name, address=view.address,
        port=view.ssh_port, source=",".join(view.service_types), state=view.state,
        gpu_summary=(f"{view.gpu_count}× {view.gpu_model or 'GPU'}" if view.gpu_count else None),
        last_seen=float(view.last_seen))


def _placement_request(request: DispatchRequest) -> PlacementRequest:
    from fleet.placement.request import PlacementRequest

    return PlacementRequest(gpus=request.gpus, min_free_memory=request.min_free_memory,
                            hosts=request.hosts)


def _target(host: str, gpu_index: int | None) -> str:
    """A host, or one of its GPUs as HOST:INDEX."""
    return host if gpu_index is None else f"{host}:{gpu_index}"


def _split_key(key: str) -> tuple[str, int]:
    address, _, port = key.rpartition(":")
    if not address or not port.isdigit():
        raise ConfigError(f"candidate {key!r}: expected ADDRESS:PORT")
    return address.strip("[]"), int(port)


def _optional_float(value: int | None) -> float | None:
    return None if value is None else float(value)
