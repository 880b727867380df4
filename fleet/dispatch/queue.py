"""Waiting for GPUs in a fair queue kept in the database (`fleet dispatch --wait`).

Queued tasks are ordered by priority (high first), then fair share (the owner with the fewest
recent GPU-hours first, fleet.dispatch.fair_share), then submission time, then id. Each waiting
dispatcher polls with a bounded, growing interval. It may claim only when its placement fits and
no task ahead of it in the queue would be placed on any of the same GPUs right now. A task ahead
that fits nowhere now still protects its *shadow*: the free GPUs of the placement it would get
if every GPU that tasks hold were free. So later small tasks may backfill GPUs the tasks ahead
cannot use, never take the ones they wait for, and a large task or gang is not starved by a
stream of small ones (the GPUs it waits for stay free as they free up, until it fits).
A gang (request.nodes > 1) waits the same way and claims all its nodes in one transaction.
The claim itself is a compare-and-set `queued → placing` plus the allocation insert, which the
database's unique index guards. A waiter refreshes its task's `checked_at` each poll; queued
tasks whose waiter stopped refreshing are ignored by the others and cancelled by the reconciler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from fleet.dispatch import records
from fleet.dispatch.fair_share import QueueSettings
from fleet.errors import (
    AllocationConflict,
    ConfigError,
    DispatchError,
    LeftQueue,
    NoPlacement,
)
from fleet.placement.limits import LimitReached

if TYPE_CHECKING:
    from db.task_runs import QueuedTask
    from fleet.context import FleetContext
    from fleet.placement.candidates import CandidateSet
    from fleet.placement.claim import Claim
    from fleet.placement.limits import UserLimits
    from fleet.placement.place import PlacementResult
    from fleet.placement.request import PlacementRequest
    from fleet.services.placement import PlacementService
    from fleet.snapshot import AllocationInfo

MIN_POLL_S = 0.1
MAX_POLL_S = 1.0
PROBE_EVERY_S = 30.0
# A queued task whose waiter has not refreshed checked_at for this long is abandoned.
WAITER_STALE_S = 60.0


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued task stands: the placement requests of the live tasks ahead of it that
    may claim now (not held back by their owner's limit), why they are ahead (fair share) in
    words, and how many GPUs each queued owner holds."""

    ahead: list[PlacementRequest]
    why: str
    held: dict[str, int]
    left_as: str | None = None  # the task's state once it is no longer queued (cancelled…)


# (owner, GPUs they hold, GPUs the task asks for) → whether a limit holds the task back
LimitCheck = Callable[[str, int, int], bool]


def _place_in_queue(context: FleetContext, task_id: int, settings: QueueSettings,
                    held_back: LimitCheck | None = None) -> QueuePlace:
    """The live queued tasks ahead of `task_id` in the queue's order (and refresh its
    heartbeat); a task its owner's limit holds back is not ahead (it cannot claim)."""
    from db.allocations import held_by_owners
    from db.sql import SessionReader
    from db.task_reads import get_task
    from db.task_runs import held_since, mark_checked, queued_tasks
    from fleet.dispatch.fair_share import decayed_gpu_hours, horizon_s, queue_order
    from fleet.placement.request import PlacementRequest

    now = context.now()
    with context.database.session() as session:
        mark_checked(session, task_id, int(now))
        # An array member whose driver does not wait for it yet has checked_at 0: no place.
        # A task ahead that is claiming (placing) stays ahead: had it been left out, a waiter
        # behind it could read the GPUs as free and claim them first.
        queued = [task for task in queued_tasks(session)
                  if task.id == task_id or now - (task.submitted_at if task.checked_at is None
                                                  else task.checked_at) <= WAITER_STALE_S]
        usage = None
        if settings.fair_share:
            half_life = settings.fair_share_half_life
            history = held_since(session, {task.owner for task in queued},
                                 horizon_s(now, half_life))
            usage = decayed_gpu_hours(history, now, half_life)
        order = queue_order(queued, usage)
        position = next((i for i, task in enumerate(order) if task.id == task_id), len(order))
        reader = SessionReader(session)
        if position == len(order):  # not queued: cancelled (or ended) by another process
            mine = get_task(reader, task_id)
            return QueuePlace([], "", {}, left_as=mine.state if mine else "gone")
        rows = [get_task(reader, task.id) for task in order[:position]]
        held = held_by_owners(session, sorted({task.owner for task in queued}))
    requests = []
    for row in rows:
        if row is None:
            continue
        try:
            wanted = PlacementRequest.from_dict(dict(row.constraints["placement"]))
        except (KeyError, TypeError, ValueError, ConfigError):
            continue  # a row fleet did not write this way cannot hold the queue
        if held_back is None or not held_back(row.owner, held.get(row.owner, 0),
                                              wanted.total_gpus):
            requests.append(wanted)
    return QueuePlace(requests, _why(order, position, usage), held)


def _why(order: list[QueuedTask], position: int, usage: dict[str, float] | None) -> str:
    """`position 2 of 5; fair share: ann 10.0 recent GPU-h, bob 0.0` (owners in queue order)."""
    where = f"position {position + 1} of {len(order)}"
    if usage is None or position == 0:
        return where
    owners = list(dict.fromkeys(task.owner for task in order[:position + 1]))
    shares = ", ".join(f"{owner} {usage.get(owner, 0.0):.1f}" for owner in owners)
    return f"{where}; fair share (recent GPU-h): {shares}"


def blocked_by_ahead(mine: Sequence[tuple[str, tuple[int, ...]]], ahead: list[PlacementRequest],
                     candidates: CandidateSet, allocations: dict[tuple[str, int], AllocationInfo],
                     now: float) -> bool:
    """Whether a task ahead would be placed on any GPU of `mine` ((host, indices) per node)
    right now, or, when it fits nowhere now, whether its shadow holds one of them."""
    from fleet.placement.place import place

    wanted = {(host, index) for host, indices in mine for index in indices}
    for request in ahead:
        theirs = place(request, candidates, allocations, now)
        if not theirs.placed:
            theirs = shadow_placement(request, candidates, allocations, now)
        if any((node.host, index) in wanted for node in theirs.nodes
               for index in node.gpu_indices):
            return True
    return False


def shadow_placement(request: PlacementRequest, candidates: CandidateSet,
                     allocations: dict[tuple[str, int], AllocationInfo], now: float
                     ) -> PlacementResult:
    """Where `request` would be placed if every GPU a task holds were free (GPUs under
    reservations, drained, unhealthy or filtered out stay as they are). A busy GPU keeps its
    utilisation unless the request filters on it, so the shadow prefers GPUs free now."""
    from dataclasses import replace

    from fleet.placement.place import place

    def held_by_task(info: AllocationInfo | None) -> bool:
        return info is not None and info.kind == "task"

    gpus = tuple(
        replace(gpu, allocation=None, memory_used_bytes=0, process_count=0,
                utilization_pct=0.0 if request.max_util is not None else gpu.utilization_pct)
        if held_by_task(allocations.get(gpu.key, gpu.allocation)) else gpu
        for gpu in candidates.gpus)
    others = {key: info for key, info in allocations.items() if not held_by_task(info)}
    return place(request, replace(candidates, gpus=gpus), others, now)


def node_gpus(result: PlacementResult) -> list[tuple[str, tuple[int, ...]]]:
    """(host, GPU indices) of every node of a placement."""
    return [(node.host, node.gpu_indices) for node in result.nodes]


# Claims a placement's GPUs under the owner's limits: a Claim per node, or None when a race
# (or the owner's limit) was lost and the task waits on.
NodeClaimer = Callable[["PlacementResult", "UserLimits"], Awaitable["list[Claim] | None"]]


async def wait_and_claim(
    context: FleetContext,
    placement: PlacementService,
    request: PlacementRequest,
    task_id: int,
    owner: str,
    *,
    timeout_s: float,
    on_wait: Callable[[str], None] | None = None,
    override_limits: bool = False,
) -> Claim:
    """Wait (at most `timeout_s`) until the queued task may claim GPUs, then claim them.

    While its owner's `limits.max_gpus_per_user` holds it back, it waits and says so.
    """
    from fleet.placement.claim import claim

    async def claim_one(result: PlacementResult, limits: UserLimits) -> list[Claim] | None:
        assert result.host is not None
        taken = await _try_claim(context, placement, partial(claim, limits=limits), result.host,
                                 result.gpu_indices, task_id, owner)
        return None if taken is None else [taken]

    claims = await wait_and_claim_nodes(context, placement, request, task_id, owner,
                                        claim_one, timeout_s=timeout_s, on_wait=on_wait,
                                        override_limits=override_limits)
    return claims[0]


async def wait_and_claim_nodes(
    context: FleetContext,
    placement: PlacementService,
    request: PlacementRequest,
    task_id: int,
    owner: str,
    claim_nodes: NodeClaimer,
    *,
    timeout_s: float,
    on_wait: Callable[[str], None] | None = None,
    override_limits: bool = False,
) -> list[Claim]:
    """Wait as `wait_and_claim` does, then claim the placement with `claim_nodes` (a gang's
    nodes all at once); returns its claims in rank order."""
    from fleet.monitor.config import load_settings
    from fleet.placement.limits import (
        LimitSettings,
        limit_settings,
        limits_for,
        over_gpu_limit,
    )
    from fleet.placement.place import place
    from fleet.unix_groups import group_lookup

    settings = load_settings(context.inventory)
    queue_settings = settings.section("queue", QueueSettings)
    limit_conf = limit_settings(settings)
    groups_of = group_lookup()
    mine = limits_for(LimitSettings() if override_limits else limit_conf, owner, groups_of)
    beyond = over_gpu_limit(mine, 0, request.total_gpus)
    if beyond is not None:  # more than the owner may ever hold: waiting cannot help
        raise LimitReached(f"task {task_id} can never start: {beyond}")

    def held_back(other: str, held: int, wanted: int) -> bool:
        return over_gpu_limit(limits_for(limit_conf, other, groups_of), held, wanted) is not None

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    interval = MIN_POLL_S
    last_probe = float("-inf")
    told = ""
    while True:
        probe = loop.time() - last_probe >= PROBE_EVERY_S
        candidates = await placement.candidates(request, probe_stale=probe)
        if probe:
            last_probe = loop.time()
        allocations = await placement.active_allocations()
        standing = await asyncio.to_thread(_place_in_queue, context, task_id, queue_settings,
                                           held_back)
        if standing.left_as is not None:
            raise LeftQueue(f"task {task_id} left the queue while it waited: {standing.left_as}",
                            cancelled=standing.left_as == "cancelled")
        ahead = standing.ahead
        now = time.time()
        result = place(request, candidates, allocations, now)
        if result.host is None and probe:  # at first, then as often as stale hosts are probed
            refuse_if_never_fits(task_id, request, candidates, now)
        over = over_gpu_limit(mine, standing.held.get(owner, 0), request.total_gpus)
        if over is None and result.host is not None and not blocked_by_ahead(
                node_gpus(result), ahead, candidates, allocations, now):
            taken = await claim_nodes(result, mine)
            if taken is not None:
                return taken
            interval = MIN_POLL_S
        message = (f"task {task_id} waits for a limit: {over}" if over is not None
                   else f"task {task_id} queued ({standing.why}): {len(ahead)} ahead; "
                   + result.summary() if result.host is None
                   else f"task {task_id} queued behind {len(ahead)} task(s) ({standing.why})")
        if on_wait is not None and message != told:
            on_wait(message)
            told = message
        remaining = deadline - loop.time()
        if remaining <= 0:
            from fleet.render.explain import render_explain

            raise NoPlacement(f"no GPUs for task {task_id} within the queue timeout "
                              f"({timeout_s:g}s): {result.summary()}",
                              explanation=render_explain(result))
        await asyncio.sleep(min(interval, remaining))
        interval = min(interval * 1.5, MAX_POLL_S)


def refuse_if_never_fits(task_id: int, request: PlacementRequest, candidates: CandidateSet,
                         now: float) -> None:
    """NoPlacement (exit 7) when no host could ever take the request, even with every GPU free
    and every host up (more GPUs than any host has, a model or label none has): waiting
    would only end at the queue timeout."""
    from fleet.placement.feasible import never_fits

    impossible = never_fits(request, candidates, now)
    if impossible is not None:
        from fleet.render.explain import render_explain

        raise NoPlacement(f"task {task_id} can never start on these hosts, even with every GPU "
                          f"free and every host up: {impossible.summary()}",
                          explanation=render_explain(impossible))


async def _try_claim(context: FleetContext, placement: PlacementService,
                     claim: Callable[..., Claim], host: str,
                     indices: tuple[int, ...], task_id: int, owner: str) -> Claim | None:
    """queued → placing, then claim; back to queued if another claim won the race (or the
    owner's other claims reached their limit meanwhile)."""
    database = context.database
    taken = await try_claim_queued(context, placement, task_id, lambda: [claim(
        database, host, indices, kind="task", owner=owner, task_id=task_id)])
    return None if taken is None else taken[0]


async def try_claim_queued(context: FleetContext, placement: PlacementService, task_id: int,
                           attempt: Callable[[], list[Claim]]) -> list[Claim] | None:
    """Move the task queued → placing and run `attempt` (a claim, in a thread); back to
    queued, returning None, when it lost a race, met a drain placement had not seen yet (now
    shown to placement) or met the owner's limit."""
    database = context.database
    moved = await asyncio.to_thread(records.set_fields, database, task_id,
                                    from_states=("queued",), state="placing")
    if not moved:
        raise DispatchError(f"task {task_id} left the queue (cancelled by another process?)")
    try:
        return await asyncio.to_thread(attempt)
    except (AllocationConflict, LimitReached) as exc:  # a race lost, or a limit reached
        await asyncio.to_thread(records.set_fields, database, task_id,
                                from_states=("placing",), state="queued")
        if isinstance(exc, AllocationConflict):
            await placement.drain_seen_by_claim(exc)
        return None
