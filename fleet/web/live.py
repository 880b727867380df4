"""The overview's live rows: kept from the monitor's snapshots, and only changed cells pushed.

Every page shares one `LiveRows`. Each snapshot recomputes the rows of the hosts it names as
changed. Two streams carry what differs: `live` the host rows' changed cells (one `rows` event,
encoded once for every page), and `live/gpus?h=HOST…` (or `?all=1`) the changed GPU cells of the
hosts a page shows expanded (`gpus` events, first with every cell of those GPUs and the names of
the hosts read so far, whose lists are whole; a GPU its host no longer reports is sent as null,
and the page removes its row). A page drawn at another version first gets every host row, so a
reconnecting page catches up. With no page watching, nothing is computed until one asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from fleet.server.relay import EVENT_STREAM_HEADERS, relay
from fleet.server.stream import Broadcaster, Subscriber, sse_frame
from fleet.snapshot import FleetSnapshot
from fleet.web.rows import SORT_ONLY_CELLS, Cells, HostRows, fleet_rows, host_rows
from fleet.wire.codec import encode

log = logging.getLogger(__name__)

# Without a new snapshot for this long, every row is recomputed: ages and staleness move on.
RECHECK_S = 5.0
# Frames that may wait for one browser before it is dropped (it reconnects and catches up).
CLIENT_QUEUE_FRAMES = 32
# GPU cells by host, then by GPU index (as text: JSON keys); None: that GPU is gone.
GpuCells = dict[str, dict[str, Cells | None]]


def changed_cells(old: Cells | None, new: Cells) -> Cells:
    """The cells of `new` a page shows that differ from `old` (all of them without `old`)."""
    return {key: value for key, value in new.items()
            if key not in SORT_ONLY_CELLS and (old is None or old.get(key) != value)}


def _gpu_cells(row: HostRows) -> dict[str, Cells | None]:
    return {cells["index"]: changed_cells(None, cells) for cells in row.gpus.values()}


@dataclass
class LiveRows:
    """The latest rows and their version; `watch` and `watch_gpus` stream their changes."""

    broadcaster: Broadcaster = field(default_factory=lambda: Broadcaster(CLIENT_QUEUE_FRAMES))
    gpu_watchers: dict[Subscriber, frozenset[str] | None] = field(default_factory=dict)
    version: int = 0
    rows: dict[str, HostRows] = field(default_factory=dict)
    _pending: FleetSnapshot | None = None  # taken while nobody watched; rows not computed yet
    _latest: FleetSnapshot | None = None
    _computed_at: float = 0.0

    @property
    def watched(self) -> bool:
        return bool(self.broadcaster.subscribers or self.gpu_watchers)

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
        if not self.watched:
            self._pending = snapshot
            return
        self.current()
        if {h.spec.name for h in snapshot.hosts} != set(self.rows):
            first = not self.rows
            self._pending = snapshot
            version, _rows = self.current()
            # Hosts came or went: pages redraw rather than patch. The first rows of a server
            # that pages reached before its first snapshot (restarted): they get every row.
            self.broadcaster.publish(self.full_frame() if first else
                                     sse_frame("reload", encode({"v": version})))
            return
        now = time.time()
        names = {h.spec.name for h in snapshot.hosts} if everything else snapshot.changed
        hosts: dict[str, Cells] = {}
        gpus: GpuCells = {}
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
                    gpus.setdefault(new.name, {})[cells["index"]] = gpu_delta
            for key in old.gpus.keys() - new.gpus.keys() if new.read else ():
                gpus.setdefault(new.name, {})[old.gpus[key]["index"]] = None
        self._computed_at = time.monotonic()
        if hosts or gpus:
            self.version += 1
        if hosts:
            self.broadcaster.publish(rows_frame(self.version, hosts))
        if gpus:
            self._publish_gpus(gpus)

    def _publish_gpus(self, gpus: GpuCells) -> None:
        """Each GPU watcher's share of `gpus`, encoded once per distinct set of hosts."""
        encoded: dict[frozenset[str] | None, bytes | None] = {}
        for subscriber, wanted in list(self.gpu_watchers.items()):
            if wanted not in encoded:
                share = gpus if wanted is None else {h: c for h, c in gpus.items() if h in wanted}
                encoded[wanted] = gpus_frame(self.version, share) if share else None
            frame = encoded[wanted]
            if frame is None:
                continue
            try:
                subscriber.queue.put_nowait(frame)
            except asyncio.QueueFull:  # fallen behind: let it go (the page reconnects)
                log.info("dropping a web page's GPU stream that fell behind")
                subscriber.dropped = True
                self.gpu_watchers.pop(subscriber, None)
                subscriber.on_drop()

    def full_frame(self) -> bytes:
        """Every host row now, as one `rows` event."""
        version, rows = self.current()
        return rows_frame(version, {name: changed_cells(None, row.cells)
                                    for name, row in rows.items()})

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
            if idle and self._latest is not None and self.watched:
                self.update(self._latest, everything=True)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """`GET live?v=N`: every host row unless the page is at version N, then each change."""
        transport = request.transport
        subscriber = self.broadcaster.subscribe(
            on_drop=transport.abort if transport else lambda: None)
        try:
            return await self._stream(request, subscriber, first=lambda version: None if
                                      request.query.get("v") == str(version)
                                      else self.full_frame())
        finally:
            self.broadcaster.unsubscribe(subscriber)

    async def watch_gpus(self, request: web.Request) -> web.StreamResponse:
        """`GET live/gpus?h=HOST&h=…` (or `?all=1`): those hosts' GPU cells, then changes."""
        wanted = None if request.query.get("all") == "1" else frozenset(request.query.getall(
            "h", ()))
        transport = request.transport
        subscriber = Subscriber(asyncio.Queue(CLIENT_QUEUE_FRAMES),
                                transport.abort if transport else lambda: None)
        self.gpu_watchers[subscriber] = wanted

        def first(version: int) -> bytes:
            shown = {name: row for name, row in self.rows.items()
                     if wanted is None or name in wanted}
            return gpus_frame(version, {name: _gpu_cells(row) for name, row in shown.items()},
                              whole=sorted(name for name, row in shown.items() if row.read))

        try:
            return await self._stream(request, subscriber, first)
        finally:
            self.gpu_watchers.pop(subscriber, None)

    async def _stream(self, request: web.Request, subscriber: Subscriber,
                      first: Callable[[int], bytes | None]) -> web.StreamResponse:
        """Write `first(version)` (unless None), then the subscriber's frames, to one page."""
        response = web.StreamResponse(headers=EVENT_STREAM_HEADERS)
        try:
            await response.prepare(request)
            version, _rows = self.current()
            opening = first(version)
            if opening is not None:
                await response.write(opening)
            await relay(request, response, subscriber.queue, dropped=lambda: subscriber.dropped)
        except ConnectionError as exc:
            log.info("a web page's live stream went away: %s", exc or type(exc).__name__)
        return response

    def close(self) -> None:
        """End every stream (the server stops)."""
        self.broadcaster.close()
        for subscriber in list(self.gpu_watchers):
            self.gpu_watchers.pop(subscriber, None)
            while not subscriber.queue.empty():
                subscriber.queue.get_nowait()
            subscriber.queue.put_nowait(None)


def rows_frame(version: int, hosts: Mapping[str, Cells]) -> bytes:
    """Changed cells of hosts (by name) as one `rows` event."""
    return sse_frame("rows", encode({"v": version, "hosts": hosts}))


def gpus_frame(version: int, gpus: Mapping[str, Mapping[str, Cells | None]], *,
               whole: Sequence[str] = ()) -> bytes:
    """Changed cells of GPUs (by host name, then index; None for a GPU gone) as one event.

    `whole`: hosts whose GPUs in `gpus` are all they have (a page drops its rows of others).
    """
    frame: dict[str, object] = {"v": version, "hosts": gpus}
    if whole:
        frame["whole"] = list(whole)
    return sse_frame("gpus", encode(frame))
