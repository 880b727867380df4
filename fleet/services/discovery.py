"""Discovery: browse mDNS for candidate hosts, list them, and adopt them into the managed set.

    async with fleet.open() as f:
        found = await f.discover(timeout=3, interfaces=["eth1"])
        for view in found.views:
            print(view.name, view.endpoint, view.state, view.gpu_count)
        await f.adopt("gpu7", accept_new=True)        # pins the key; `f.status()` now probes it
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from fleet.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.candidates import CandidateRow
    from fleet.caller import Caller
    from fleet.context import FleetContext
    from fleet.discovery.adopt import AdoptResult, AdoptTarget
    from fleet.discovery.autoadopt import AutoAdoptPolicy, DiscoverySettings
    from fleet.discovery.browse import DiscoveredService, DiscoveryEvent
    from fleet.discovery.candidates import CandidateView, KnownHost
    from fleet.model import HostSpec

T = TypeVar("T")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiscoveryOutcome:
    """One `discover()`: the hosts listed, skipped records, auto-adoptions and their refusals."""

    views: tuple[CandidateView, ...]
    skipped: tuple[str, ...]
    elapsed_s: float
    adopted: tuple[AdoptResult, ...] = ()
    refused: tuple[str, ...] = ()


class DiscoveryService:
    """mDNS candidates and adoption; adopted hosts join the context's managed set."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context

    # -- settings and the host list --------------------------------------------------------

    def discovery_settings(self) -> DiscoverySettings:
        """The `discovery:` settings in effect (defaults, the settings file, the inventory's
        `settings:`), validated; ConfigError naming the file and line of a bad key."""
        from fleet.discovery.autoadopt import effective_discovery_settings

        return effective_discovery_settings(self.context.inventory)

    def known_endpoints(self) -> dict[tuple[str, int], KnownHost]:
        """(address, port) → name and source of every host fleet manages now: the inventory's
        SSH hosts and the adopted hosts. A database row of a host since removed from the
        inventory is not managed, so it does not count (`stale_endpoints` lists those)."""
        from db.host_reads import list_hosts
        from fleet.discovery.candidates import KnownHost

        known = {(row.address, row.port): KnownHost(row.name, row.source)
                 for row in self.context.in_reader("list hosts", list_hosts)
                 if row.source == "adopted"}
        for spec in self.context.inventory.hosts:
            if spec.connection == "ssh":
                known[spec.key] = KnownHost(spec.name, "inventory")
        return known

    def stale_endpoints(self) -> dict[tuple[str, int], str]:
        """(address, port) → name of database rows that no managed host accounts for."""
        from db.host_reads import list_hosts

        known = self.known_endpoints()
        names = {host.name.casefold() for host in known.values()}
        return {(row.address, row.port): row.name
                for row in self.context.in_reader("list hosts", list_hosts)
                if (row.address, row.port) not in known and row.name.casefold() not in names}

    async def _known_with_aliases(self) -> dict[tuple[str, int], KnownHost]:
        """known_endpoints plus each managed host's resolved addresses (a host the inventory
        names by DNS name is also known at its IP address)."""
        from fleet.discovery.adopt import resolved_aliases

        known = await asyncio.to_thread(self.known_endpoints)
        for key, (_, host) in (await resolved_aliases(known)).items():
            known.setdefault(key, host)
        return known

    # -- browsing --------------------------------------------------------------------------

    async def discover(
        self,
        *,
        timeout: float = 3.0,
        interfaces: Sequence[str] | None = None,
        session: str | None = None,
        service_types: Sequence[str] | None = None,
        auto_adopt: AutoAdoptPolicy | None = None,
        record: bool = True,
    ) -> DiscoveryOutcome:
        """Browse once for `timeout` s, record candidates, list them merged with known hosts.

        `interfaces`, `session` and `service_types` default to the `discovery:` settings
        (the settings file's, then the inventory's; interfaces: every interface). With
        `auto_adopt` (or discovery.auto_adopt), eligible new hosts are adopted, pinning their
        key.
        """
        from fleet.discovery.browse import browse_once, select_interfaces
        from fleet.discovery.candidates import build_views, record_browse

        settings = self.discovery_settings()
        types = tuple(service_types or settings.service_types)
        selection = select_interfaces(list(interfaces or settings.interfaces))
        wanted_session = session if session is not None else settings.session
        result = await browse_once(selection, timeout=timeout, service_types=types)
        now = int(time.time())
        rows: list[CandidateRow]
        if record:
            touched = await asyncio.to_thread(self._discovery_db, "record candidates",
                                              lambda db: record_browse(db, result, types, now))
            rows = await asyncio.to_thread(self._discovery_db, "list candidates",
                                              _all_candidates)
        else:
            rows = [_transient_row(index, service, now, gone) for index, (service, gone) in
                    enumerate([*((s, False) for s in result.services),
                               *((s, True) for s in result.removed)])]
            touched = {row.id for row in rows}
        known = await self._known_with_aliases()
        views = [view for view in build_views(rows, known, session_name=wanted_session)
                 if touched & set(view.candidate_ids)]
        policy = auto_adopt or settings.auto_adopt
        adopted: list[AdoptResult] = []
        refused: list[str] = []
        if policy is not None and record:
            adopted, refused = await self._auto_adopt(policy, views)
            if adopted:
                known = await self._known_with_aliases()
                rows = await asyncio.to_thread(self._discovery_db, "list candidates",
                                              _all_candidates)
                views = [view for view in build_views(rows, known, session_name=wanted_session)
                         if touched & set(view.candidate_ids)]
        return DiscoveryOutcome(tuple(views), result.skipped, result.elapsed_s, tuple(adopted),
                                tuple(refused))

    async def discovered_hosts(self, *, session: str | None = None,
                         include_gone: bool = True) -> list[CandidateView]:
        """Every stored candidate host, merged with known hosts."""
        from fleet.discovery.candidates import build_views

        rows = await asyncio.to_thread(self._discovery_db, "list candidates",
                                              _all_candidates)
        known = await self._known_with_aliases()
        views = build_views(rows, known, session_name=session)
        return [view for view in views if include_gone or view.state != "gone"]

    async def watch_discovery(
        self, *, interfaces: Sequence[str] | None = None,
        service_types: Sequence[str] | None = None,
    ) -> AsyncIterator[DiscoveryEvent]:
        """Browse continuously, recording each change; yields events until the caller stops.

        Goodbyes (`removed`) mark candidates gone at once; hosts that vanish without a goodbye
        stay "seen" until the next one-shot browse or the monitor's SSH check notices.
        """
        from db.candidates import mark_gone, upsert_candidate
        from fleet.discovery.browse import DiscoverySession, select_interfaces
        from fleet.discovery.candidates import candidate_in

        settings = self.discovery_settings()
        queue: asyncio.Queue[DiscoveryEvent] = asyncio.Queue(maxsize=10_000)
        selection = select_interfaces(list(interfaces or settings.interfaces))
        types = tuple(service_types or settings.service_types)

        def store(event: DiscoveryEvent, db: Session) -> None:
            if event.service is None:
                return
            candidate_id = upsert_candidate(db, candidate_in(event.service), int(time.time()))
            if event.kind == "removed":
                mark_gone(db, [candidate_id])

        async with DiscoverySession(selection, types, on_event=queue.put_nowait):
            while True:
                event = await queue.get()
                await asyncio.to_thread(self._discovery_db, "record candidate",
                                        lambda db, e=event: store(e, db))
                yield event

    # -- adoption --------------------------------------------------------------------------

    async def adopt(self, target: str, *, accept_new: bool = False,
                    expected_fingerprint: str | None = None,
                    inventory_append: bool = False, name: str | None = None,
                    user: str | None = None, auto: bool = False,
                    caller: Caller | None = None) -> AdoptResult:
        """Verify and pin the host key of a candidate (NAME or ADDR[:PORT]) and manage it.

        `expected_fingerprint` is the SHA256 fingerprint the operator confirmed: the key is
        pinned only if the host presents exactly that one (no `accept_new` needed). Raises
        HostKeyRejected (unknown key without accept_new, changed, revoked, spoofed, not the
        confirmed key), HostUnreachable, or ConfigError (unknown/ambiguous candidate, name
        taken). The result's `name` (and `spec`) is the managed host's name. Through the
        server only an admin `caller` may adopt (PermissionDenied otherwise).
        """
        from fleet.discovery.adopt import check_adopt_name, resolve_target
        from fleet.services.permissions import require_admin

        await require_admin(self.context, caller, f"adopt {target}")
        if name is not None:
            check_adopt_name(name, self.context.inventory.groups)
        views = await self.discovered_hosts()
        return await self._adopt_target(resolve_target(target, views, name=name),
                                        accept_new=accept_new, inventory_append=inventory_append,
                                        user=user, auto=auto,
                                        expected_fingerprint=expected_fingerprint,
                                        explicit_name=name is not None)

    async def _adopt_target(self, target: AdoptTarget, *, accept_new: bool,
                            inventory_append: bool, user: str | None, auto: bool,
                            expected_fingerprint: str | None = None,
                            explicit_name: bool = False) -> AdoptResult:
        from fleet.discovery.adopt import (
            AdoptResult,
            adopted_spec,
            check_name_free,
            same_endpoint,
            verify_host_key,
        )
        from fleet.discovery.inventory_append import append_host, check_append

        known = await asyncio.to_thread(self.known_endpoints)
        match = await same_endpoint(target.address, target.port, known)
        existing = match[1] if match is not None else None
        if match is None and not explicit_name:
            stale = (await asyncio.to_thread(self.stale_endpoints)).get(
                (target.address, target.port))
            if stale is not None:  # a host removed from the inventory: adopt it by its name
                target = dataclasses.replace(target, name=stale)
        spec = adopted_spec(target, user)
        if match is not None:
            # The managed host itself (maybe under another spelling): check its own endpoint.
            spec = dataclasses.replace(spec, name=match[1].name, address=match[0][0],
                                       port=match[0][1])
        same_name = [] if explicit_name else [
            key for key, host in known.items()
            if host.name.casefold() == target.name.casefold()
            and key != (target.address, target.port)]
        managed = [] if existing else [(host.name, address, port)
                                       for (address, port), host in known.items()]
        path = self.context.inventory.path
        append = inventory_append and existing is None
        if append and path is None:
            raise ConfigError("--inventory-append: there is no inventory file; pass "
                              "--inventory FILE (an existing file)")

        def before_pin() -> None:
            check_name_free(target, known)
            if append and path is not None:  # a failed adopt pins nothing: check it first
                check_append(path, name=spec.name, address=spec.address, port=spec.port,
                             user=user)

        check = await verify_host_key(
            spec, self.context.ssh_options, accept_new=accept_new, same_name_hosts=same_name,
            before_pin=None if existing else before_pin,
            expected_fingerprint=expected_fingerprint, managed_hosts=managed)
        if check.same_as is not None:  # another endpoint of a managed host: add nothing
            same_name_, same_address, same_port = check.same_as
            return AdoptResult(same_name_, same_address, same_port, check.key_type,
                               check.fingerprint, False, same_name_, None, None, auto)
        line: int | None = None
        if append and path is not None:
            line = await asyncio.to_thread(append_host, path, name=spec.name,
                                           address=spec.address, port=spec.port, user=user)
        result = AdoptResult(spec.name, spec.address, spec.port, check.key_type,
                             check.fingerprint, check.newly_pinned,
                             existing.name if existing else None,
                             path if line is not None else None, line, auto)
        if existing is None or (existing.source == "adopted" and match is not None
                                and match[0] == (spec.address, spec.port)):
            await asyncio.to_thread(self._discovery_db, "store adopted host",
                                    lambda db: _store_adoption(db, spec, target, result))
            self.context.hosts.changed()
        return result

    async def _auto_adopt(self, policy: AutoAdoptPolicy, views: Sequence[CandidateView]) -> \
            tuple[list[AdoptResult], list[str]]:
        from fleet.discovery.adopt import AdoptTarget, check_adopt_name, host_name_for
        from fleet.errors import HostError

        adopted: list[AdoptResult] = []
        refused: list[str] = []
        for view in views:
            if policy.refusal(view) is not None:
                continue
            target = AdoptTarget(host_name_for(view.name, view.address), view.address,
                                 view.ssh_port, view.candidate_ids, view.session)
            try:
                check_adopt_name(target.name, self.context.inventory.groups)
                result = await self._adopt_target(target, accept_new=True,
                                                  inventory_append=False,
                                                  user=policy.user, auto=True)
                if result.already_known_as is not None:
                    message = (f"{view.name} ({view.endpoint}): already managed as "
                               f"{result.already_known_as}; skipped")
                    _log.info("auto-adopt: %s", message)
                    await asyncio.to_thread(self._discovery_db, "log skip",
                                            lambda db, m=message: _log_skip(db, m))
                    continue
                adopted.append(result)
            except (HostError, ConfigError) as exc:
                message = f"{view.name} ({view.endpoint}): {exc}"
                refused.append(message)
                await asyncio.to_thread(self._discovery_db, "log refusal",
                                        lambda db, m=message: _log_refusal(db, m))
        return adopted, refused

    def _discovery_db(self, action: str, work: Callable[[Session], T]) -> T:
        """Run `work` in one database session; database failures become StorageError."""
        return self.context.in_session(action, work)


def _all_candidates(session: Session) -> list[CandidateRow]:
    from db.candidates import list_candidates

    return list_candidates(session)


def _transient_row(index: int, service: DiscoveredService, now: int, gone: bool) -> \
        CandidateRow:
    """A candidate row that is not stored (discover with record=False)."""
    from db.candidates import CandidateRow
    from fleet.discovery.candidates import candidate_in

    seen = candidate_in(service)
    return CandidateRow(-index - 1, seen.name, seen.address, seen.port, seen.service_type,
                        seen.server, seen.ssh_port, seen.gpu_count, seen.gpu_model,
                        seen.session, seen.summary, now, now, "gone" if gone else "seen")


def _store_adoption(session: Session, spec: HostSpec, target: AdoptTarget,
                    result: AdoptResult) -> None:
    from db.candidates import candidates_at, set_candidate_state
    from db.events import add_event
    from db.hosts import sync_hosts
    from db.types import HostFacts

    now = int(time.time())
    ids = sync_hosts(session, [HostFacts(name=spec.name, address=spec.address, port=spec.port,
                                         user=spec.user, source="adopted",
                                         labels=spec.labels)], now)
    rows = candidates_at(session, spec.address, spec.port)
    set_candidate_state(session, {row.id for row in rows} | set(target.candidate_ids),
                        "adopted")
    how = "auto-adopted (session policy)" if result.auto else "adopted"
    add_event(session, ts=now, kind="host_adopted", severity="info", host_id=ids[spec.name],
              message=f"{spec.name} ({spec.address}:{spec.port}) {how}; host key "
                      f"{result.key_type} {result.fingerprint}"
                      + (" pinned" if result.newly_pinned else " already trusted"),
              data={"address": spec.address, "port": spec.port, "auto": result.auto,
                    "fingerprint": result.fingerprint, "session": target.session})


def _log_skip(session: Session, message: str) -> None:
    from db.events import add_event

    add_event(session, ts=int(time.time()), kind="auto_adopt_skipped", severity="info",
              message=message)


def _log_refusal(session: Session, message: str) -> None:
    from db.events import add_event

    add_event(session, ts=int(time.time()), kind="auto_adopt_refused", severity="warning",
              message=message)
