"""The real `FleetService`: maps the TUI's protocol onto `fleet.service.Fleet` and its mixins.

Operations whose mixin is missing from the running build raise FeatureUnavailable, which the
UI shows as a message instead of crashing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from fleet.errors import ConfigError, FleetError, HostKeyRejected
from fleet.snapshot import AllocationInfo, FleetSnapshot
from tui.polling import poll_snapshots
from tui.service import (
    AllocationView,
    CandidateView,
    DispatchRequest,
    EventView,
    FeatureUnavailable,
    GpuHistory,
    HistoryPoint,
    HostKeyFingerprint,
    PlacementPreview,
    TaskView,
)

if TYPE_CHECKING:
    from fleet.service import Fleet

HISTORY_POINTS = 120  # plot resolution: the window is bucketed into about this many points
TASK_LIMIT = 300  # newest tasks listed
LOG_STOP_S = 5.0  # how long a stopped log follower may take to close its channel


class FleetAdapter:
    """FleetService over a live `Fleet`; `scripts` are offered in the dispatch dialog."""

    def __init__(self, fleet: Fleet, *, poll_interval_s: float = 2.0,
                 scripts: Sequence[str] = (), owner: str | None = None) -> None:
        self.fleet = fleet
        self.poll_interval_s = poll_interval_s
        self.scripts = list(scripts)
        self.owner = owner

    def _feature(self, name: str, what: str) -> Any:
        """The Fleet method `name`, or FeatureUnavailable naming `what`."""
        method = getattr(self.fleet, name, None)
        if not callable(method):
            raise FeatureUnavailable(what)
        return method

    async def watch(self) -> AsyncIterator[FleetSnapshot]:
        watch = getattr(self.fleet, "watch", None)
        if callable(watch):
            async for snapshot in watch():
                yield snapshot
            return
        async for snapshot in poll_snapshots(self.fleet, self._allocation_map,
                                             interval_s=self.poll_interval_s):
            yield snapshot

    async def _allocation_map(self) -> dict[tuple[str, int], AllocationInfo]:
        allocations = getattr(self.fleet, "allocations", None)
        if not callable(allocations):
            return {}
        return {(a.host, a.gpu_idx): AllocationInfo(
            allocation_id=a.id, kind=a.kind, owner=a.owner, task_id=a.task_id,
            task_name=a.task_name, expires_at=a.expires_at, note=a.note)
            for a in await allocations()}

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
        rows = await self._feature("tasks", "task list (dispatch)")(limit=TASK_LIMIT)
        return [_task_view(row) for row in reversed(rows)]

    async def log_tail(self, task_id: int) -> AsyncIterator[str]:
        follow = self._feature("follow", "task logs (dispatch)")
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        stop = asyncio.Event()

        async def run() -> None:
            try:
                await follow(task_id, on_output=chunks.put_nowait, stop=stop, follow=True)
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
        await self._feature("cancel", "cancel (dispatch)")(task_id)

    async def events(self, limit: int = 500) -> list[EventView]:
        rows = await self.fleet.events(limit=limit)
        return [EventView(row.id, float(row.ts), row.severity, row.kind, row.message, row.host,
                          row.gpu_idx, row.task_id) for row in rows]

    async def allocations(self) -> list[AllocationView]:
        rows = await self._feature("allocations", "allocations (placement)")()
        return [AllocationView(a.id, a.kind, a.owner, a.host, a.gpu_idx, float(a.created_at),
                               a.task_id, None if a.expires_at is None else float(a.expires_at),
                               a.note) for a in rows]

    async def reserve(self, host: str, gpu_indices: Sequence[int], duration_s: float | None,
                      note: str | None) -> list[AllocationView]:
        from fleet.placement.claim import claim
        from fleet.placement.reservations import current_owner

        expires = None if duration_s is None else int(time.time() + duration_s)
        made = await asyncio.to_thread(
            claim, self.fleet.database, host, list(gpu_indices), kind="reservation",
            owner=self.owner or current_owner(), note=note, expires_at=expires)
        return [AllocationView(allocation_id, made.kind, made.owner, host, index,
                               float(made.created_at), None,
                               None if made.expires_at is None else float(made.expires_at),
                               made.note)
                for allocation_id, index in zip(made.allocation_ids, made.gpu_indices,
                                                strict=True)]

    async def release(self, allocation_id: int) -> None:
        await self.fleet.release([allocation_id])

    async def drain(self, host: str, gpu_index: int | None, reason: str) -> None:
        await self._set_drain(host, gpu_index, True, reason)

    async def undrain(self, host: str, gpu_index: int | None) -> None:
        await self._set_drain(host, gpu_index, False, None)

    async def _set_drain(self, host: str, gpu_index: int | None, drained: bool,
                         reason: str | None) -> None:
        target = host if gpu_index is None else f"{host}:{gpu_index}"
        if drained:
            await self.fleet.drain(target, reason, by=self.owner)
        else:
            await self.fleet.undrain(target, by=self.owner)

    async def candidates(self) -> list[CandidateView]:
        views = await self._feature("discovered_hosts", "discovery")()
        return [CandidateView(
            key=f"{v.address}:{v.ssh_port}", name=v.name, address=v.address, port=v.ssh_port,
            source=",".join(v.service_types), state=v.state,
            gpu_summary=(f"{v.gpu_count}× {v.gpu_model or 'GPU'}" if v.gpu_count else None),
            last_seen=float(v.last_seen)) for v in views]

    async def host_key(self, candidate_key: str) -> HostKeyFingerprint:
        from fleet.model import HostSpec
        from fleet.ssh.connect import fetch_host_key

        address, port = _split_key(candidate_key)
        spec = HostSpec(name=address, address=address, port=port)
        key_type, fingerprint = await fetch_host_key(spec, self.fleet.ssh_options)
        return HostKeyFingerprint(key_type, fingerprint)

    async def adopt(self, candidate_key: str, fingerprint: HostKeyFingerprint) -> str:
        presented = await self.host_key(candidate_key)
        if presented != fingerprint:
            raise HostKeyRejected(candidate_key, "the host key changed since you confirmed it "
                                  f"({fingerprint.sha256} -> {presented.sha256}); not adopted")
        result = await self._feature("adopt", "adopt (discovery)")(candidate_key,
                                                                   accept_new=True)
        spec = getattr(result, "spec", None)
        return str(getattr(spec, "name", candidate_key))

    async def preview(self, request: DispatchRequest) -> PlacementPreview:
        from fleet.placement.explain import render_explain

        result = await self.fleet.place(_placement_request(request))
        lines = tuple(line.rstrip() for line in render_explain(result).splitlines()
                      if line.strip())
        indices = tuple(g.index for g in result.gpus)
        return PlacementPreview(result.host is not None, result.host, indices, lines)

    async def dispatch(self, request: DispatchRequest) -> TaskView:
        from pathlib import Path

        from fleet.dispatch.lifecycle import DispatchRequest as FleetDispatchRequest

        submit = self._feature("submit", "dispatch")
        started = await submit(FleetDispatchRequest(
            script=Path(request.script), placement=_placement_request(request),
            args=request.args, name=request.name, owner=self.owner))
        return _task_view(await self.fleet.task(started.task_id))

    def suggested_scripts(self) -> list[str]:
        return list(self.scripts)


def _placement_request(request: DispatchRequest) -> Any:
    from fleet.placement.request import MemorySize, PlacementRequest

    memory = (None if request.min_free_memory_bytes is None
              else MemorySize(bytes=request.min_free_memory_bytes))
    return PlacementRequest(gpus=request.gpus, min_free_memory=memory, hosts=request.hosts)


def _split_key(key: str) -> tuple[str, int]:
    address, _, port = key.rpartition(":")
    if not address or not port.isdigit():
        raise ConfigError(f"candidate {key!r}: expected ADDRESS:PORT")
    return address.strip("[]"), int(port)


def _seconds(value: object) -> float | None:
    """Epoch seconds from seconds or milliseconds (db rows use both), or None."""
    if not isinstance(value, int | float):
        return None
    return float(value) / 1000 if value > 1e11 else float(value)


def _task_view(row: Any) -> TaskView:
    """A TaskView from whatever task record dispatch returns (attribute names as in db.Task)."""
    try:
        task_id = int(row.id if hasattr(row, "id") else row.task_id)
    except (AttributeError, TypeError, ValueError) as exc:
        raise FleetError(f"unexpected task record from fleet: {row!r}") from exc
    gpus = [getattr(g, "idx", g) for g in getattr(row, "gpus", ()) or ()]
    return TaskView(
        task_id=task_id, name=str(getattr(row, "name", f"task {task_id}")),
        state=str(getattr(row, "state", "unknown")), owner=str(getattr(row, "owner", "")),
        host=getattr(row, "host", None) if isinstance(getattr(row, "host", None), str) else None,
        gpus=tuple(int(g) for g in gpus if isinstance(g, int)),
        submitted_at=_seconds(getattr(row, "submitted_at", None)),
        started_at=_seconds(getattr(row, "started_at", None)),
        ended_at=_seconds(getattr(row, "ended_at", None)),
        exit_code=getattr(row, "exit_code", None), error=getattr(row, "error", None))
