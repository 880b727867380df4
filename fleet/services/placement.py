"""Placement, claims and reservations over the managed hosts and the stored allocations."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from fleet.errors import AllocationConflict, DispatchError, GpuDrained, NoPlacement

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.rows import AllocationDetail
    from db.sql import SqlReader
    from db.types import AllocationKind
    from fleet.caller import Caller
    from fleet.context import FleetContext
    from fleet.fanout import HostStatus
    from fleet.model import HostSpec
    from fleet.placement.candidates import CandidateSet, RecentLoad
    from fleet.placement.claim import Claim
    from fleet.placement.idle import IdleOutcome, IdleSettings
    from fleet.placement.limits import UserLimits
    from fleet.placement.place import PlacementResult
    from fleet.placement.request import PlacementRequest
    from fleet.records import UnmanagedGpu
    from fleet.services.hosts import HostService
    from fleet.snapshot import AllocationInfo, FleetSnapshot

# How far back least-loaded looks, and the bucket width it reads history in.
RECENT_WINDOW_S = 300.0
RECENT_BUCKET_S = 60
DEFAULT_CLAIM_ATTEMPTS = 8
DEFAULT_PROBE_TIMEOUT_S = 10.0
# Random pause before re-placing after losing a race, so racers do not collide in lockstep.
RETRY_PAUSE_S = (0.005, 0.05)


class PlacementService:
    """Where work fits, claiming it, and operator reservations."""

    def __init__(self, context: FleetContext, hosts: HostService) -> None:
        self.context = context
        self.host_service = hosts
        # The in-process monitor's newest snapshot (set once the monitor service exists).
        self.live_snapshot: Callable[[], FleetSnapshot | None] | None = None
        # Shows the stored drain flags in that monitor's snapshots now (set with it).
        self.refresh_drains: Callable[[], Awaitable[None]] | None = None

    async def drain_seen_by_claim(self, error: AllocationConflict) -> None:
        """After a claim refused a drained GPU (GpuDrained), puts the stored drains in the live
        view before placement runs again, which would otherwise pick it until the monitor's
        next flush; other conflicts change nothing."""
        if isinstance(error, GpuDrained) and self.refresh_drains is not None:
            await self.refresh_drains()

    async def candidates(
        self,
        request: PlacementRequest,
        *,
        snapshot: FleetSnapshot | None = None,
        probe_stale: bool = True,
        probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    ) -> CandidateSet:
        """The freshest view of the managed hosts and GPUs to place `request` on.

        The monitor's `snapshot` when given (or, when a monitor runs in this process over
        every managed host, its newest one); else the database's latest samples, and when those
        are stale for hosts the request could use, those hosts are probed once (and recorded)
        before the view is rebuilt. Raises ConfigError when the request's host pattern matches
        no managed host.
        """
        from fleet.inventory import select_hosts
        from fleet.placement.candidates import candidates_from_snapshot
        from fleet.placement.filters import stale_host_names

        inventory = await self.context.hosts.refresh()
        select_hosts(inventory, request.hosts)  # a typo in --hosts is an error, not "none"
        recent = await self.context.query("read recent history", self._recent_load)
        if snapshot is None and self.live_snapshot is not None:
            current = self.live_snapshot()
            seen = {host.spec.name for host in current.hosts} if current is not None else set()
            if current is not None and all(spec.name in seen for spec in inventory.hosts):
                snapshot = current  # this process's monitor covers every managed host
        if snapshot is not None:
            return candidates_from_snapshot(snapshot, recent)
        found = await self._candidates_from_db(recent, "database")
        probing = probe_stale and self.context.may_probe
        stale = stale_host_names(request, found, self.context.now()) if probing else []
        if not stale:
            return found
        wanted = set(stale)
        statuses = await self._probe([spec for spec in inventory.hosts if spec.name in wanted],
                                     probe_timeout)
        await self.host_service.record(statuses)
        refreshed = await self._candidates_from_db(recent, "probe")
        return replace(refreshed, notes=(f"probed {len(stale)} host(s) with stale data: "
                                         + ", ".join(stale),))

    async def place(
        self,
        request: PlacementRequest,
        *,
        snapshot: FleetSnapshot | None = None,
        probe_stale: bool = True,
        rng: random.Random | None = None,
        caller: Caller | None = None,
    ) -> PlacementResult:
        """Where `request` fits now (nothing is claimed); the result explains every choice.

        Expired reservations are released first. Raises PolicyError (a ConfigError) for a
        policy that cannot be loaded or returns a non-score.
        """
        from fleet.placement.place import place

        await self.require_policy(request, caller)
        await self.expire_reservations()
        found = await self.candidates(request, snapshot=snapshot, probe_stale=probe_stale)
        allocations = await self.active_allocations()
        return place(request, found, allocations, self.context.now(), rng=rng)

    async def require_policy(self, request: PlacementRequest, caller: Caller | None) -> None:
        """Only an admin may name a policy that is not built in through the server: a
        "module:function" policy runs code in the server's process (PermissionDenied)."""
        from fleet.placement.scoring.policies import BUILTIN_POLICIES
        from fleet.services.permissions import require_admin

        if request.policy.strip() not in BUILTIN_POLICIES:
            await require_admin(self.context, caller, f"place with policy {request.policy!r}")

    async def place_and_claim(
        self,
        request: PlacementRequest,
        *,
        kind: AllocationKind = "task",
        owner: str | None = None,
        task_id: int | None = None,
        note: str | None = None,
        hold_s: float | None = None,
        snapshot: FleetSnapshot | None = None,
        attempts: int = DEFAULT_CLAIM_ATTEMPTS,
        limits: UserLimits | None = None,
    ) -> Claim:
        """Place `request` and claim the chosen GPUs in one transaction; retry on a lost race.

        With `limits` (the owner's), LimitReached (exit 7) when the claim would put the owner
        over their GPU limit. With `hold_s`, the claim expires that long after it is made.

        When another process claims one of the chosen GPUs first, or drained it since placement
        saw it, placement runs again on fresh allocation data and drains (ties broken at random
        so racers spread out), at most `attempts` times.
        Raises NoPlacement (exit code 7) with the explanation when nothing fits, DispatchError
        when every attempt lost its race.
        """
        from fleet.placement.claim import claim
        from fleet.placement.reservations import current_owner
        from fleet.render.explain import render_explain

        who = owner or current_owner()
        rng = random.Random()
        conflicts: list[str] = []
        database = self.context.database
        for attempt in range(1, max(1, attempts) + 1):
            result = await self.place(request, snapshot=snapshot, probe_stale=attempt == 1,
                                      rng=rng if attempt > 1 else None)
            if result.host is None:
                raise NoPlacement(no_placement_message(result),
                                  explanation=render_explain(result))
            host, indices = result.host, result.gpu_indices
            try:
                claimed = await self.context.call("claim GPUs", partial(
                    claim, database, host, indices, kind=kind, owner=who, task_id=task_id,
                    note=note, hold_s=hold_s, limits=limits))
            except AllocationConflict as exc:
                conflicts.append(str(exc))
                snapshot = None  # the snapshot's allocations (or drains) just proved stale
                await self.drain_seen_by_claim(exc)
                await asyncio.sleep(rng.uniform(*RETRY_PAUSE_S))
                continue
            return replace(claimed, placement=result, attempts=attempt)
        raise DispatchError(f"could not claim GPUs in {attempts} attempts; other claims won "
                            f"every race ({'; '.join(conflicts[-3:])})")

    async def reserve(
        self,
        request: PlacementRequest,
        *,
        duration_s: float | None = None,
        note: str | None = None,
        owner: str | None = None,
        caller: Caller | None = None,
    ) -> Claim:
        """Hold GPUs for an operator (until released, or for `duration_s` seconds).

        Through the server (`caller` given) the owner is always the caller's user, and only
        an admin may name a policy that is not built in ("module:function" runs code in the
        server's process).
        """
        from fleet.placement.limits import check_reservation
        from fleet.placement.reservations import current_owner

        await self.require_policy(request, caller)
        who = caller.user if caller is not None else owner or current_owner()
        limits = self.user_limits(who)
        check_reservation(limits, duration_s)
        return await self.place_and_claim(request, kind="reservation", owner=who, note=note,
                                          hold_s=duration_s, limits=limits)

    async def reserve_gpus(
        self,
        host: str,
        gpu_indices: Sequence[int],
        *,
        duration_s: float | None = None,
        note: str | None = None,
        owner: str | None = None,
        caller: Caller | None = None,
    ) -> Claim:
        """Hold exactly these GPUs of `host` (all or none), e.g. picked in the TUI.

        Raises AllocationConflict (exit 6) when one is already held, ConfigError for a host
        fleet does not manage. Through the server the owner is always the caller's user.
        """
        from fleet.placement.claim import claim
        from fleet.placement.limits import check_reservation
        from fleet.placement.reservations import current_owner

        self.context.hosts.spec(host)
        who = caller.user if caller is not None else owner or current_owner()
        limits = self.user_limits(who)
        check_reservation(limits, duration_s)
        database = self.context.database
        indices = list(gpu_indices)
        return await self.context.call("reserve GPUs", partial(
            claim, database, host, indices, kind="reservation", owner=who, note=note,
            hold_s=duration_s, limits=limits))

    async def mark_idle(self, settings: IdleSettings) -> IdleOutcome:
        """Mark allocations whose GPUs stay idle, unmark busy ones, release idle reservations
        when configured (fleet.placement.idle); the leader's housekeeping calls it."""
        from fleet.placement.idle import mark_idle

        database = self.context.database
        now = self.context.now()
        return await self.context.call("mark idle allocations",
                                       lambda: mark_idle(database, settings, now))

    def user_limits(self, owner: str) -> UserLimits:
        """`owner`'s limits from the effective settings (ConfigError for a bad `limits:`)."""
        from fleet.monitor.config import load_settings
        from fleet.placement.limits import limit_settings, limits_for

        return limits_for(limit_settings(load_settings(self.context.inventory)), owner)

    async def release(self, allocation_ids: Sequence[int], *, force: bool = False,
                      caller: Caller | None = None) -> list[int]:
        """Release allocations by id (a running task's only with `force`); returns the ids.

        A `caller` who is not an admin may release only their own allocations
        (PermissionDenied, exit code 8, and a `permission_denied` event otherwise).
        """
        from fleet.placement.reservations import release
        from fleet.services.permissions import require_owner

        if caller is not None and not caller.is_admin:
            owners = await self._owners(allocation_ids)
            await require_owner(self.context, caller,
                                f"release allocation {', '.join(map(str, allocation_ids))}",
                                owners)
        database = self.context.database
        return await self.context.call("release allocations",
                                       lambda: release(database, allocation_ids, force=force))

    async def _owners(self, allocation_ids: Sequence[int]) -> list[str]:
        from db.allocation_details import allocation_details

        def load(reader: SqlReader) -> list[str]:
            return [row.owner for row in allocation_details(
                reader, active_only=False, allocation_ids=list(allocation_ids))]

        return await self.context.query("read allocations", load)

    async def release_mine(self, owner: str | None = None, *,
                           caller: Caller | None = None) -> list[int]:
        """Release every active reservation of `owner` (default: the current user, or the
        caller's user through the server)."""
        from fleet.placement.reservations import current_owner, release_owned

        who = caller.user if caller is not None else owner or current_owner()
        database = self.context.database
        return await self.context.call("release reservations",
                                       lambda: release_owned(database, who))

    async def unmanaged_use(self) -> list[UnmanagedGpu]:
        """GPUs running processes fleet did not start, with their pids and Unix users, as the
        monitor last judged them (fleet.health.unmanaged)."""
        from db.unmanaged import unmanaged_gpus

        return await self.context.query("read unmanaged use", unmanaged_gpus)

    async def allocations(self, active_only: bool = True) -> list[AllocationDetail]:
        """Allocations with host, GPU and task (active only by default); expires old ones first
        (fleet.placement.reservations.list_allocations: it writes only when one is due)."""
        from fleet.placement.reservations import list_allocations

        database = self.context.database
        return await self.context.call(
            "list allocations", lambda: list_allocations(database, active_only=active_only))

    async def active_allocations(self) -> dict[tuple[str, int], AllocationInfo]:
        """(host, GPU index) → holder of every active allocation."""
        from db.allocation_details import allocation_details
        from fleet.snapshot import allocation_infos

        def load(reader: SqlReader) -> dict[tuple[str, int], AllocationInfo]:
            return allocation_infos(allocation_details(reader, active_only=True))

        return await self.context.query("read allocations", load)

    async def expire_reservations(self) -> int:
        """Release reservations past their expiry (a write only when one is due); returns how
        many."""
        from fleet.placement.reservations import expire

        database = self.context.database
        return await self.context.call("release expired reservations", lambda: expire(database))

    async def _candidates_from_db(self, recent: dict[tuple[str, int], RecentLoad],
                                  source: str) -> CandidateSet:
        from db.gpus import latest_gpus
        from db.host_reads import list_hosts
        from db.sql import SessionReader
        from fleet.placement.candidates import candidates_from_database

        specs = self.context.hosts.inventory().hosts

        def load(session: Session) -> CandidateSet:
            rows = list_hosts(SessionReader(session))
            latest = latest_gpus(session, [spec.name for spec in specs])
            return candidates_from_database(specs, rows, latest, recent, now=self.context.now(),
                                            source=source)

        return await self.context.read("read hosts and samples", load)

    def _recent_load(self, reader: SqlReader) -> dict[tuple[str, int], RecentLoad]:
        from db.history import gpu_history
        from fleet.placement.candidates import summarise_history

        now = self.context.now()
        points = gpu_history(reader, since_ms=int((now - RECENT_WINDOW_S) * 1000),
                             until_ms=int(now * 1000) + 1, bucket_s=RECENT_BUCKET_S)
        return summarise_history(points)

    async def _probe(self, specs: Sequence[HostSpec], timeout: float) -> list[HostStatus]:
        from fleet.fanout import probe_hosts

        return await probe_hosts(specs, self.context.ssh_options, timeout=timeout)


def no_placement_message(result: PlacementResult) -> str:
    """The headline and, per excluded host or GPU, why (kept short for a terminal)."""
    lines = [result.summary()]
    for exclusion in result.exclusions[:40]:
        where = exclusion.host if exclusion.index is None else f"{exclusion.host}:{exclusion.index}"
        lines.append(f"  {where}: {'; '.join(exclusion.reasons)}")
    if len(result.exclusions) > 40:
        lines.append(f"  ... and {len(result.exclusions) - 40} more (use --explain)")
    return "\n".join(lines)
