"""The latest FleetSnapshot and its subscribers: each gets the newest one, never a backlog."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

from fleet.snapshot import FleetSnapshot


class _Subscriber:
    """One subscriber's wake-up flag and the host names changed since it last looked."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.changed: set[str] = set()


class SnapshotHub:
    """Holds the newest snapshot; subscribers that fall behind get one coalesced update.

    Memory per subscriber is bounded by the number of hosts (the set of changed names), no
    matter how slow it is: intermediate snapshots are simply skipped.
    """

    def __init__(self, on_subscribe: Callable[[], None] | None = None) -> None:
        """`on_subscribe` is called as each subscription starts (before its first snapshot)."""
        self._on_subscribe = on_subscribe
        self._latest: FleetSnapshot | None = None
        self._subscribers: set[_Subscriber] = set()
        self._closed = False
        self.published = 0

    @property
    def subscribed(self) -> bool:
        """Whether anyone is subscribed now."""
        return bool(self._subscribers)

    @property
    def latest(self) -> FleetSnapshot | None:
        """The newest snapshot, or None before the first one."""
        return self._latest

    def publish(self, snapshot: FleetSnapshot) -> None:
        """Make `snapshot` the newest and wake every subscriber."""
        self._latest = snapshot
        self.published += 1
        for subscriber in self._subscribers:
            subscriber.changed |= snapshot.changed
            subscriber.wake.set()

    def close(self) -> None:
        """End every subscription (their iterators finish after the newest snapshot)."""
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.wake.set()

    async def subscribe(
        self, select: Callable[[FleetSnapshot, frozenset[str]], FleetSnapshot] | None = None
    ) -> AsyncGenerator[FleetSnapshot, None]:
        """The newest snapshot now (if any), then each newer one as it comes, coalesced.

        A yielded snapshot's `changed` names every host changed since the previous one this
        subscriber got. `select` may narrow each snapshot (e.g. to a host pattern).
        """
        subscriber = _Subscriber()
        self._subscribers.add(subscriber)
        if self._on_subscribe is not None:
            self._on_subscribe()
        delivered: FleetSnapshot | None = None
        try:
            while True:
                latest = self._latest
                if latest is not None and latest is not delivered:
                    subscriber.wake.clear()
                    if delivered is None:
                        changed = frozenset(host.spec.name for host in latest.hosts)
                    else:
                        changed = frozenset(subscriber.changed)
                    subscriber.changed.clear()
                    delivered = latest
                    view = FleetSnapshot(latest.taken_at, latest.hosts, changed)
                    yield select(view, changed) if select is not None else view
                    continue
                if self._closed:
                    return
                subscriber.wake.clear()
                await subscriber.wake.wait()
        finally:
            self._subscribers.discard(subscriber)
