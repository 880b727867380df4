"""The overview's live rows: kept from the monitor's snapshots, and only changed cells pushed.

Every page shares one `LiveRows`. Each snapshot recomputes the rows of the hosts it names as
changed; the cells that differ go out as one `rows` server-sent event, encoded once for every
client. A client whose page was drawn at another version first gets every row (a reconnecting
page catches up that way). With no client watching, nothing is computed until one asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

from fleet.server.relay import EVENT_STREAM_HEADERS, relay
from fleet.server.stream import Broadcaster, sse_frame
from fleet.snapshot import FleetSnapshot
from fleet.web.rows import Cells, HostRows, fleet_rows, host_rows
from fleet.wire.codec import encode

log = logging.getLogger(__name__)

# Without a new snapshot for this long, every row is recomputed: ages and staleness move on.
RECHECK_S = 5.0
# Frames that may wait for one browser before it is dropped (it reconnects and catches up).
CLIENT_QUEUE_FRAMES = 32


def changed_cells(old: Cells | None, new: Cells) -> Cells:
    """The cells of `new` that differ from `old` (all of them when there was no `old`)."""
    if old is None:
        return dict(new)
    return {key: value for key, value in new.items() if old.get(key) != value}


@dataclass
class LiveRows:
    """The latest rows and their version; `watch` streams their changes to a browser."""

    broadcaster: Broadcaster = field(default_factory=lambda: Broadcaster(CLIENT_QUEUE_FRAMES))
    version: int = 0
    rows: dict[str, HostRows] = field(default_factory=dict)
    _pending: FleetSnapshot | None = None  # taken while nobody watched; rows not computed yet
    _latest: FleetSnapshot | None = None
    _computed_at: float = 0.0

    def current(self) -> tuple[int, dict[str, HostRows]]:
        """(version, rows) as of the latest snapshot."""
        if self._pending is not None:
            snapshot, self._pending = self._pending, None
            self.rows = fleet_rows(snapshot, time.time())
            self.version += 1
            self._computed_at = time.monotonic()
        return self.version, self.rows

    def update(self, snapshot: FleetSnapshot, *, everything: bool = False) -> None:
        """Take a new snapshot: with watchers, publish what changed; else keep it for later."""
        if not self.broadcaster.subscribers:
            self._pending = snapshot
            return
        self.current()
        if {h.spec.name for h in snapshot.hosts} != set(self.rows):
            self._pending = snapshot  # hosts came or went: pages redraw rather than patch
            version, _rows = self.current()
            self.broadcaster.publish(sse_frame("reload", encode({"v": version})))
            return
        now = time.time()
        names = {h.spec.name for h in snapshot.hosts} if everything else snapshot.changed
        hosts: dict[str, Cells] = {}
        gpus: dict[str, Cells] = {}
        for host in snapshot.hosts:
            if host.spec.name not in names:
                continue
            new = host_rows(host, now)
            old = self.rows[new.name]
            self.rows[new.name] = new
            host_delta = changed_cells(old.cells, new.cells)
            if host_delta:
                hosts[new.name] = host_delta
            for key, cells in new.gpus.items():
                gpu_delta = changed_cells(old.gpus.get(key), cells)
                if gpu_delta:
                    gpus[key] = gpu_delta
        self._computed_at = time.monotonic()
        if hosts or gpus:
            self.version += 1
            self.broadcaster.publish(rows_frame(self.version, hosts, gpus))

    def full_frame(self) -> bytes:
        """Every row now, as one `rows` event."""
        version, rows = self.current()
        hosts = {name: dict(row.cells) for name, row in rows.items()}
        gpus = {key: dict(cells) for row in rows.values() for key, cells in row.gpus.items()}
        return rows_frame(version, hosts, gpus)

    async def follow(self, snapshots: AsyncIterator[FleetSnapshot]) -> None:
        """Take every snapshot of `snapshots`; recompute all rows when none came for RECHECK_S."""
        recheck = asyncio.create_task(self._recheck(), name="fleet-web-recheck")
        try:
            async for snapshot in snapshots:
                self._latest = snapshot
                self.update(snapshot)
        finally:
            recheck.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recheck

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_S)
            idle = time.monotonic() - self._computed_at >= RECHECK_S
            if idle and self._latest is not None and self.broadcaster.subscribers:
                self.update(self._latest, everything=True)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """`GET live?v=N`: every row unless the page is at version N, then each change."""
        transport = request.transport
        subscriber = self.broadcaster.subscribe(
            on_drop=transport.abort if transport else lambda: None)
        response = web.StreamResponse(headers=EVENT_STREAM_HEADERS)
        try:
            await response.prepare(request)
            version, _rows = self.current()
            if request.query.get("v") != str(version):
                await response.write(self.full_frame())
            await relay(request, response, subscriber.queue, dropped=lambda: subscriber.dropped)
        except ConnectionError as exc:
            log.info("a web page's live stream went away: %s", exc or type(exc).__name__)
        finally:
            self.broadcaster.unsubscribe(subscriber)
        return response


def rows_frame(version: int, hosts: dict[str, Cells], gpus: dict[str, Cells]) -> bytes:
    """Changed cells of hosts (by name) and GPUs (by "HOST:IDX") as one `rows` event."""
    return sse_frame("rows", encode({"v": version, "hosts": hosts, "gpus": gpus}))
