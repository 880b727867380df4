"""The monitor's live snapshots: changed hosts coalesced into one FleetSnapshot per frame."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Iterable

from fleet.monitor.snapshots import SnapshotHub
from fleet.snapshot import FleetSnapshot, HostSnapshot

# How long changes are gathered before one snapshot is published (at most).
PUBLISH_COALESCE_S = 0.05


class SnapshotPublisher:
    """Publishes the hosts' newest snapshots every PUBLISH_COALESCE_S at most, when some changed;
    with no subscriber (a headless `fleet monitor`) the changes are held until someone asks
    (latest(), subscribe(), close()), and run() does not wake for them at all."""

    def __init__(self, hosts: Callable[[], Iterable[HostSnapshot]],
                 changed: Iterable[str]) -> None:
        self.hub = SnapshotHub(on_subscribe=self._wake_if_held)
        self._hosts = hosts
        self._changed = set(changed)
        self._held = False  # changes run() left unpublished (no subscriber)
        self._dirty = asyncio.Event()

    def changed(self, name: str) -> None:
        """Host `name` has a new snapshot: publish it with the next frame."""
        self._changed.add(name)
        if self.hub.subscribed:
            self._dirty.set()
        else:  # nobody to publish to: a wake-up per frame would be spent on nothing
            self._held = True

    def _wake_if_held(self) -> None:
        """A subscription starts: changes held meanwhile go out with the next frame."""
        if self._changed:
            self._dirty.set()

    def publish(self) -> None:
        """Publish every host now, naming those changed since the last publish."""
        changed = frozenset(self._changed)
        self._changed.clear()
        self._held = False
        self.hub.publish(FleetSnapshot(time.time(), tuple(self._hosts()), changed))

    def latest(self) -> FleetSnapshot | None:
        """The newest snapshot (made now if changes were held back: nobody subscribed)."""
        if self._held:
            self.publish()
        return self.hub.latest

    def subscribe(self, names: frozenset[str] | None = None) -> AsyncGenerator[FleetSnapshot, None]:
        """Snapshots as they change (coalesced), optionally only the hosts in `names`."""
        if self._held:  # the subscription starts from the newest state, not a held-back one
            self.publish()
        if names is None:
            return self.hub.subscribe()

        def narrow(snapshot: FleetSnapshot, changed: frozenset[str]) -> FleetSnapshot:
            hosts = tuple(host for host in snapshot.hosts if host.spec.name in names)
            return FleetSnapshot(snapshot.taken_at, hosts, changed & names)

        return self.hub.subscribe(narrow)

    async def run(self) -> None:
        """Publish the changes, a frame at a time, until cancelled."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(PUBLISH_COALESCE_S)
            self._dirty.clear()
            if self.hub.subscribed:
                self.publish()
            else:
                self._held = True

    def close(self) -> None:
        """Publish the final state and end every subscription."""
        self.publish()
        self.hub.close()
