"""Live snapshots by polling `Fleet.status` — the TUI's source when the monitor is not running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from fleet.fanout import HostStatus
from fleet.snapshot import AllocationInfo, FleetSnapshot, GpuSnapshot, HostSnapshot

AllocationLoader = Callable[[], Awaitable[Mapping[tuple[str, int], AllocationInfo]]]


class StatusSource(Protocol):
    """What polling needs: one probe of every host."""

    async def status(self, pattern: str | None = None, *, timeout: float = 15.0,
                     record: bool = True) -> list[HostStatus]: ...


def build_snapshot(statuses: Sequence[HostStatus], previous: FleetSnapshot | None,
                   allocations: Mapping[tuple[str, int], AllocationInfo], now: float
                   ) -> FleetSnapshot:
    """A FleetSnapshot from one round of probes; a down host keeps its last good report."""
    hosts = []
    changed = set()
    for status in statuses:
        name = status.spec.name
        before = previous.host(name) if previous else None
        report = status.report or (before.report if before else None)
        last_seen = status.finished_at if status.is_up else (before.last_seen if before else None)
        gpus = tuple(
            GpuSnapshot(host=name, index=reading.index, reading=reading,
                        state="lost" if reading.lost else "ok",
                        allocation=allocations.get((name, reading.index)))
            for reading in (report.gpus if report else ()))
        host = HostSnapshot(spec=status.spec, state=status.state, reason=status.reason,
                            report=report, last_seen=last_seen, gpus=gpus)
        if before != host:
            changed.add(name)
        hosts.append(host)
    return FleetSnapshot(taken_at=now, hosts=tuple(hosts), changed=frozenset(changed))


async def poll_snapshots(source: StatusSource, allocations: AllocationLoader, *,
                         interval_s: float = 2.0, timeout_s: float = 10.0
                         ) -> AsyncIterator[FleetSnapshot]:
    """Probe every host each `interval_s` (recording samples) and yield a snapshot per round."""
    previous: FleetSnapshot | None = None
    while True:
        started = time.monotonic()
        statuses, held = await asyncio.gather(
            source.status(timeout=timeout_s, record=True), allocations())
        previous = build_snapshot(statuses, previous, held, time.time())
        yield previous
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
