"""The health part of the public `Fleet` service API: events and manual drain/undrain."""

from __future__ import annotations

import asyncio
import getpass
import time
from typing import TYPE_CHECKING

from fleet.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from db.engine import Database
    from db.event_queries import EventView
    from db.types import Severity
    from fleet.health.drain import DrainOutcome


class HealthAPI:
    """Event history and drain flags; state lives on the Fleet instance (its database)."""

    database: Database

    async def events(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        severity: Severity | None = None,
        host: str | None = None,
        kind: str | None = None,
        limit: int | None = 100,
    ) -> list[EventView]:
        """The newest `limit` events matching every filter, oldest first (times epoch s)."""
        from sqlalchemy.exc import SQLAlchemyError

        from db.errors import DatabaseError
        from db.event_queries import find_events

        def load() -> list[EventView]:
            try:
                with self.database.session() as session:
                    return find_events(
                        session, since=None if since is None else int(since),
                        until=None if until is None else int(until), severity=severity,
                        host=host, kind=kind, limit=limit)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            except (SQLAlchemyError, DatabaseError) as exc:
                raise StorageError(f"cannot read events: {exc}") from exc

        return await asyncio.to_thread(load)

    async def drain(self, target: str, reason: str | None = None, *,
                    by: str | None = None) -> DrainOutcome:
        """Stop placing work on TARGET ("HOST", "HOST:IDX" or a GPU UUID); an event records it."""
        return await self._set_drain(target, True, reason, by)

    async def undrain(self, target: str, *, by: str | None = None) -> DrainOutcome:
        """Allow work on TARGET again."""
        return await self._set_drain(target, False, None, by)

    async def _set_drain(self, target: str, drained: bool, reason: str | None,
                         by: str | None) -> DrainOutcome:
        from fleet.health.drain import set_drain

        who = by or getpass.getuser()

        def apply() -> DrainOutcome:
            with self.database.session() as session:
                return set_drain(session, target, drained=drained, reason=reason, by=who,
                                 now=time.time())

        return await asyncio.to_thread(apply)
