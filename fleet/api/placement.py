"""The placement part of the public `Fleet` service API: placement, claims, reservations."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from db.allocation_details import AllocationDetail
    from db.engine import Database
    from db.types import AllocationKind
    from fleet.inventory import Inventory
    from fleet.placement.candidates import CandidateSet, RecentLoad
    from fleet.placement.claim import Claim
    from fleet.placement.place import PlacementResult
    from fleet.placement.request import PlacementRequest
    from fleet.snapshot import AllocationInfo, FleetSnapshot
    from fleet.ssh.options import SshOptions

# How far back least-loaded looks, and the bucket width it reads history in.
RECENT_WINDOW_S = 300.0
RECENT_BUCKET_S = 60
DEFAULT_CLAIM_ATTEMPTS = 8
DEFAULT_PROBE_TIMEOUT_S = 10.0
# Random pause before re-placing after losing a race, so racers do not collide in lockstep.
RETRY_PAUSE_S = (0.005, 0.05)
T = TypeVar("T")


class PlacementAPI:
    """Placement and reservation operations of the Fleet service (state lives on Fleet)."""

    database: Database
    inventory: Inventory
    ssh_options: SshOptions

    async def candidates(
        self,
        request: PlacementRequest,
        *,
        snapshot: FleetSnapshot | None = None,
        probe_stale: bool = True,
        probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    ) -> CandidateSet:
        """The freshest view of the inventory's hosts and GPUs to place `request` on.

        The monitor's `snapshot` when given; else the database's latest samples, and when those
        are stale for hosts the request could use, those hosts are probed once (and recorded)
        before the view is rebuilt. Raises ConfigError when the request's host pattern matches
        no inventory host.
        """
        from fleet.inventory import select_hosts
        from fleet.placement.candidates import candidates_from_snapshot
        from fleet.placement.filters import stale_host_names

        select_hosts(self.inventory, request.hosts)  # a typo in --hosts is an error, not "none"
        recent = await asyncio.to_thread(self._recent_load, time.time())
        if snapshot is not None:
            return candidates_from_snapshot(snapshot, recent)
        now = time.time()
        found = await asyncio.to_thread(self._candidates_from_db, recent, now, "database")
        stale = stale_host_names(request, found, now) if probe_stale else []
        if not stale:
            return found
        await self._probe_and_record(stale, probe_timeout)
        refreshed = await asyncio.to_thread(self._candidates_from_db, recent, time.time(), "probe")
        return replace(refreshed, notes=(f"probed {len(stale)} host(s) with stale data: "
                                         + ", ".join(stale),))

    async def place(
        self,
        request: PlacementRequest,
        *,
        snapshot: FleetSnapshot | None = None,
        probe_stale: bool = True,
        rng: random.Random | None = None,
    ) -> PlacementResult:
        """Where `request` fits now (nothing is claimed); the result explains every choice.

        Expired reservations are released first. Raises PolicyError (a ConfigError) for a
        policy that cannot be loaded or returns a non-score.
        """
        from fleet.placement.place import place

        await asyncio.to_thread(self._expire_reservations)
        found = await self.candidates(request, snapshot=snapshot, probe_stale=probe_stale)
        allocations = await asyncio.to_thread(self._active_allocations)
        return place(request, found, allocations, time.time(), rng=rng)

    async def place_and_claim(
        self,
        request: PlacementRequest,
        *,
        kind: AllocationKind = "task",
        owner: str | None = None,
        task_id: int | None = None,
        note: str | None = None,
        expires_at: int | None = None,
        snapshot: FleetSnapshot | None = None,
        attempts: int = DEFAULT_CLAIM_ATTEMPTS,
    ) -> Claim:
        """Place `request` and claim the chosen GPUs in one transaction; retry on a lost race.

        When another process claims one of the chosen GPUs first, placement runs again on fresh
        allocation data (ties broken at random so racers spread out), at most `attempts` times.
        Raises NoPlacement (exit code 7) with the explanation when nothing fits, DispatchError
        when every attempt lost its race.
        """
        from fleet.errors import AllocationConflict, DispatchError, NoPlacement
        from fleet.placement.claim import claim
        from fleet.placement.explain import render_explain
        from fleet.placement.reservations import current_owner

        who = owner or current_owner()
        rng = random.Random()
        conflicts: list[str] = []
        for attempt in range(1, max(1, attempts) + 1):
            result = await self.place(request, snapshot=snapshot, probe_stale=attempt == 1,
                                      rng=rng if attempt > 1 else None)
            if result.host is None:
                raise NoPlacement(_no_placement_message(result),
                                  explanation=render_explain(result))
            host = result.host
            try:
                claimed = await asyncio.to_thread(
                    _guarded, "claim GPUs", claim, self.database, host, result.gpu_indices,
                    kind=kind, owner=who, task_id=task_id, note=note, expires_at=expires_at)
            except AllocationConflict as exc:
                conflicts.append(str(exc))
                snapshot = None  # the snapshot's allocations are what just proved stale
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
    ) -> Claim:
        """Hold GPUs for an operator (until released, or for `duration_s` seconds)."""
        expires_at = None if duration_s is None else int(time.time() + duration_s)
        return await self.place_and_claim(request, kind="reservation", owner=owner, note=note,
                                          expires_at=expires_at)

    async def release(self, allocation_ids: Sequence[int], *, force: bool = False) -> list[int]:
        """Release allocations by id (a running task's only with `force`); returns the ids."""
        from fleet.placement.reservations import release

        return await asyncio.to_thread(_guarded, "release allocations", release, self.database,
                                       allocation_ids, force=force)

    async def release_mine(self, owner: str | None = None) -> list[int]:
        """Release every active reservation of `owner` (default: the current user)."""
        from fleet.placement.reservations import current_owner, release_owned

        who = owner or current_owner()
        return await asyncio.to_thread(_guarded, "release reservations", release_owned,
                                       self.database, who)

    async def allocations(self, active_only: bool = True) -> list[AllocationDetail]:
        """Allocations with host, GPU and task (active only by default); expires old ones first."""
        from fleet.placement.reservations import list_allocations

        return await asyncio.to_thread(_guarded, "list allocations", list_allocations,
                                       self.database, active_only=active_only)

    def _expire_reservations(self) -> int:
        from fleet.placement.reservations import expire

        with _storage("release expired reservations"):
            return expire(self.database)

    def _candidates_from_db(self, recent: dict[tuple[str, int], RecentLoad], now: float,
                            source: str) -> CandidateSet:
        from db.gpus import latest_gpus
        from db.hosts import list_hosts
        from fleet.placement.candidates import candidates_from_database

        specs = self.inventory.hosts
        with _storage("read hosts and samples"), self.database.session() as session:
            rows = list_hosts(session)
            latest = latest_gpus(session, [spec.name for spec in specs])
        return candidates_from_database(specs, rows, latest, recent, now=now, source=source)

    def _recent_load(self, now: float) -> dict[tuple[str, int], RecentLoad]:
        from db.history import gpu_history
        from fleet.placement.candidates import summarise_history

        with _storage("read recent history"), self.database.session() as session:
            points = gpu_history(session, since_ms=int((now - RECENT_WINDOW_S) * 1000),
                                 until_ms=int(now * 1000) + 1, bucket_s=RECENT_BUCKET_S)
        return summarise_history(points)

    def _active_allocations(self) -> dict[tuple[str, int], AllocationInfo]:
        from db.allocation_details import allocation_details
        from fleet.snapshot import AllocationInfo

        with _storage("read allocations"), self.database.session() as session:
            rows = allocation_details(session)
        return {
            (row.host, row.gpu_idx): AllocationInfo(
                allocation_id=row.id, kind=row.kind, owner=row.owner, task_id=row.task_id,
                task_name=row.task_name, expires_at=row.expires_at, note=row.note)
            for row in rows
        }

    async def _probe_and_record(self, host_names: Sequence[str], timeout: float) -> None:
        from fleet.fanout import probe_hosts
        from fleet.recorder import record_statuses

        wanted = set(host_names)
        specs = [spec for spec in self.inventory.hosts if spec.name in wanted]
        statuses = await probe_hosts(specs, self.ssh_options, timeout=timeout)

        def record() -> None:
            with _storage("record samples"), self.database.session() as session:
                record_statuses(session, statuses)

        await asyncio.to_thread(record)


def _no_placement_message(result: PlacementResult) -> str:
    """The headline and, per excluded host or GPU, why (kept short for a terminal)."""
    lines = [result.summary()]
    for exclusion in result.exclusions[:40]:
        where = exclusion.host if exclusion.index is None else f"{exclusion.host}:{exclusion.index}"
        lines.append(f"  {where}: {'; '.join(exclusion.reasons)}")
    if len(result.exclusions) > 40:
        lines.append(f"  ... and {len(result.exclusions) - 40} more (use --explain)")
    return "\n".join(lines)


def _guarded(action: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function(*args, **kwargs)` with database errors turned into StorageError."""
    with _storage(action):
        return function(*args, **kwargs)


def _storage(action: str) -> _Storage:
    return _Storage(action)


class _Storage:
    """Database errors as StorageError naming what placement was doing."""

    def __init__(self, action: str) -> None:
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        from db.errors import AllocationConflict, DatabaseError
        from fleet.errors import StorageError

        if isinstance(exc, AllocationConflict):
            return
        if isinstance(exc, SQLAlchemyError | DatabaseError):
            raise StorageError(f"cannot {self.action}: {exc}") from exc
