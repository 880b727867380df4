"""Health records: the event history and manual drain/undrain of hosts and GPUs."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from db.rows import EventView, HostHistoryPoint
    from db.sql import SqlReader
    from db.types import Severity
    from fleet.caller import Caller
    from fleet.context import FleetContext
    from fleet.health.drain import DrainOutcome


class HealthService:
    """Events, host history and drain flags, all from the database."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context
        # Awaited after a drain flag changes: the running monitor shows it at once (placement
        # places from its snapshots), not at its next flush.
        self.drains_changed: Callable[[], Awaitable[None]] | None = None

    async def events(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        severity: Severity | None = None,
        host: str | None = None,
        kind: str | None = None,
        limit: int | None = 100,
        newest_first: bool = False,
    ) -> list[EventView]:
        """The newest `limit` events matching every filter (times epoch s, since ≤ ts < until).

        Oldest first, like a log, unless `newest_first`. An unknown `host` or severity, or a
        non-positive limit, is a ConfigError.
        """
        from db.event_queries import find_events
        from fleet.targets import resolve_host

        def load(reader: SqlReader) -> list[EventView]:
            if host is not None:
                resolve_host(reader, host)
            try:
                found = find_events(
                    reader, since=None if since is None else int(since),
                    until=None if until is None else int(until), severity=severity,
                    host=host, kind=kind, limit=limit)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            return found[::-1] if newest_first else found

        return await self.context.query("read events", load)

    async def host_history(
        self,
        *,
        since: float,
        until: float,
        host: str | None = None,
        bucket_s: int | None = None,
        limit: int | None = None,
    ) -> list[HostHistoryPoint]:
        """Host load and memory samples between two epoch times, raw or per `bucket_s`.

        An unknown `host`, or a non-positive bucket or limit, is a ConfigError.
        """
        from db.host_history import host_history
        from fleet.targets import resolve_host

        def load(reader: SqlReader) -> list[HostHistoryPoint]:
            if host is not None:
                resolve_host(reader, host)
            try:
                return host_history(reader, since_ms=int(since * 1000),
                                    until_ms=int(until * 1000), host=host, bucket_s=bucket_s,
                                    limit=limit)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc

        return await self.context.query("read host history", load)

    async def drain(self, target: str, reason: str | None = None, *,
                    by: str | None = None, caller: Caller | None = None) -> DrainOutcome:
        """Stop placing work on TARGET ("HOST", "HOST:IDX" or a GPU UUID); an event records it.

        Through the server only an admin `caller` may drain (PermissionDenied otherwise).
        """
        return await self._set_drain(target, True, reason, by, caller)

    async def undrain(self, target: str, *, by: str | None = None,
                      caller: Caller | None = None) -> DrainOutcome:
        """Allow work on TARGET again (admins only through the server)."""
        return await self._set_drain(target, False, None, by, caller)

    async def _set_drain(self, target: str, drained: bool, reason: str | None,
                         by: str | None, caller: Caller | None) -> DrainOutcome:
        from fleet.health.drain import set_drain
        from fleet.services.permissions import require_admin

        await require_admin(self.context, caller,
                            f"{'drain' if drained else 'undrain'} {target}")
        who = caller.user if caller is not None else by or getpass.getuser()
        now = self.context.now()
        outcome = await self.context.write("set the drain flag", lambda session: set_drain(
            session, target, drained=drained, reason=reason, by=who, now=now))
        if self.drains_changed is not None:
            await self.drains_changed()
        return outcome
