"""Feeding webhooks every event the database records, whoever recorded it, while a monitor runs.

Events come from many writers: the monitor's health rules, a `fleet dispatch` process ending
its task, the reconciler, `fleet drain`. Instead of each sending its own notifications, the
running monitor reads new event rows every `hooks.webhook_poll_s` (after the highest id it has
seen; it starts at the newest, so history is not replayed) and submits them to the
WebhookRunner. On PostgreSQL ids are taken before commit, so a lower id can appear after a
higher one: ids skipped over are asked for again for GAP_WAIT_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from fleet.errors import StorageError
from fleet.health.webhook_delivery import FailureCallback, RetryPolicy, WebhookRunner
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.engine import Database
    from db.rows import EventView
    from fleet.health.hooks import HookSettings

log = logging.getLogger(__name__)

BATCH = 500  # events read per query (a backlog takes several, back to back)
GAP_WAIT_S = 30.0  # how long an id skipped over may still turn up (a transaction committing)
MAX_GAPS = 1000
T = TypeVar("T")


def event_document(row: EventView) -> dict[str, object]:
    """The JSON document a webhook of format "json" receives for a stored event."""
    return {"id": row.id, "ts": row.ts, "kind": row.kind, "severity": row.severity,
            "host": row.host, "gpu_index": row.gpu_idx, "gpu_uuid": row.gpu_uuid,
            "task_id": row.task_id, "message": row.message, "data": dict(row.data)}


class WebhookFeed:
    """Polls the events table and hands new events to a WebhookRunner; `start`, then `close`."""

    def __init__(self, database: Database, settings: HookSettings,
                 on_failure: FailureCallback | None = None,
                 policy: RetryPolicy | None = None) -> None:
        self.database = database
        self.settings = settings
        self.on_failure = on_failure
        self.policy = policy
        self.runner: WebhookRunner | None = None
        self.events_read = 0
        self._after_id = 0
        self._gaps: dict[int, float] = {}  # id skipped over -> when it was first missed
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start after the newest stored event and poll until close()."""
        from db.event_tail import last_event_id

        with storage_errors("read the newest event id", self.database.url):
            self._after_id = await asyncio.to_thread(self._read, last_event_id)
        self.runner = WebhookRunner(
            self.settings.webhooks, max_concurrent=self.settings.max_concurrent,
            queue_size=self.settings.queue_size, on_failure=self.on_failure,
            policy=self.policy, close_timeout_s=self.settings.close_timeout_s)
        self._task = asyncio.create_task(self._loop(), name="webhook feed")

    async def poll(self) -> int:
        """Submit the events stored since the last poll; returns how many were read."""
        from db.event_tail import events_after

        assert self.runner is not None, "start() first"
        read = 0
        while True:
            query = partial(events_after, after_id=self._after_id, also_ids=tuple(self._gaps),
                            limit=BATCH)
            with storage_errors("read new events", self.database.url):
                rows = await asyncio.to_thread(self._read, query)
            self._advance([row.id for row in rows])
            for row in rows:
                self.runner.submit(event_document(row))
            read += len(rows)
            self.events_read += len(rows)
            if len(rows) < BATCH:
                return read

    async def close(self) -> None:
        """Stop polling, submit what was stored meanwhile, let deliveries finish (bounded)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.runner is None:
            return
        try:
            await self.poll()
        except StorageError as exc:
            log.error("webhook feed: last read failed: %s", exc)
        await self.runner.close()

    def _read(self, query: Callable[[Session], T]) -> T:
        with self.database.session() as session:
            return query(session)

    def _advance(self, ids: list[int]) -> None:
        """Move past the ids read; remember ids skipped over, forget those too old."""
        now = time.monotonic()
        for event_id in ids:
            self._gaps.pop(event_id, None)
        newer = sorted(event_id for event_id in ids if event_id > self._after_id)
        if newer:
            expected = self._after_id + 1
            for event_id in newer:
                for missing in range(expected, min(event_id, expected + MAX_GAPS)):
                    if len(self._gaps) < MAX_GAPS:
                        self._gaps.setdefault(missing, now)
                expected = event_id + 1
            self._after_id = newer[-1]
        for event_id, since in list(self._gaps.items()):
            if now - since > GAP_WAIT_S:
                del self._gaps[event_id]

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.webhook_poll_s)
            try:
                await self.poll()
            except StorageError as exc:
                log.error("webhook feed: cannot read new events: %s", exc)
