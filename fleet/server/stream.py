"""Snapshots to many `/v1/watch` clients: one encoding per snapshot, a bounded queue per client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Frame = bytes


@dataclass(eq=False)
class Subscriber:
    """One watching client: its queue of frames and what to call when it is dropped."""

    queue: asyncio.Queue[Frame | None]
    on_drop: Callable[[], None]
    dropped: bool = False


@dataclass
class Broadcaster:
    """Fan-out of encoded snapshot frames; `queue_size` frames may wait per client.

    The monitor's snapshots are pushed with `publish`, which never waits: a client whose queue is
    full has fallen behind and is dropped (its connection aborted), so no client slows the monitor
    or the others.
    """

    queue_size: int = 16
    subscribers: set[Subscriber] = field(default_factory=set)
    published: int = 0
    dropped: int = 0

    def subscribe(self, on_drop: Callable[[], None]) -> Subscriber:
        """A new client; `on_drop` aborts its connection if it falls behind."""
        subscriber = Subscriber(asyncio.Queue(self.queue_size), on_drop)
        self.subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """The client went away (or its stream ended)."""
        self.subscribers.discard(subscriber)

    def publish(self, frame: Frame) -> None:
        """Queue `frame` for every client; drop each client whose queue is full."""
        self.published += 1
        for subscriber in list(self.subscribers):
            try:
                subscriber.queue.put_nowait(frame)
            except asyncio.QueueFull:
                self._drop(subscriber)

    def close(self) -> None:
        """End every stream (server stopping): each client's handler returns."""
        for subscriber in list(self.subscribers):
            self._end(subscriber)

    def _drop(self, subscriber: Subscriber) -> None:
        self.dropped += 1
        log.info("dropping a /v1/watch client that fell %d snapshots behind", self.queue_size)
        subscriber.dropped = True
        self._end(subscriber)
        subscriber.on_drop()

    def _end(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        while not subscriber.queue.empty():
            subscriber.queue.get_nowait()
        subscriber.queue.put_nowait(None)


def sse_frame(event: str, data: bytes) -> Frame:
    """One server-sent event (`data` is one line of JSON)."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"
