"""A task from request to end: record, place and claim (or queue), start on the host, follow.

Every failure after the claim ends the task in the database (which releases its GPUs) before
the error propagates, so no allocation outlives a task that never ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from fleet.dispatch import records
from fleet.dispatch.ending import DEFAULT_GRACE_S, DEFAULT_LOST_AFTER_S, Ending, ending_from_status
from fleet.dispatch.follow import (
    FollowEnd,
    HostLink,
    PollPolicy,
    cancel_remote,
    follow_task,
)
from fleet.dispatch.records import now_s
from fleet.dispatch.remote import TaskHost, task_dir_name
from fleet.dispatch.request import KEEP_QUEUED, DispatchRequest, StartedTask
from fleet.dispatch.wrapper import TASKS_BASE
from fleet.errors import DispatchError, FleetError, HostError, NoPlacement, TaskCancelled
from fleet.model import HostSpec

if TYPE_CHECKING:
    from db.rows import TaskRow
    from db.tasks import GroupKind
    from fleet.context import FleetContext
    from fleet.placement.claim import Claim
    from fleet.placement.request import PlacementRequest
    from fleet.services.placement import PlacementService

T = TypeVar("T")


async def unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event | None) -> T:
    """Await `work`, cancelling it (TaskCancelled) if `stop` is set first."""
    if stop is None:
        return await work
    job = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError as exc:  # the work goes with its caller, for the same reason
        job.cancel(*exc.args)
        with contextlib.suppress(asyncio.CancelledError):
            await job
        raise
    finally:
        stopper.cancel()
    if job.done():
        return job.result()
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
    raise TaskCancelled("cancelled before the task started")


def host_spec(context: FleetContext, name: str) -> HostSpec:
    """The managed host a task ran on; DispatchError when fleet no longer manages it."""
    spec = context.hosts.find(name)
    if spec is None:
        raise DispatchError(f"host {name!r} is not in the inventory or among adopted hosts")
    return spec


def started_of_row(context: FleetContext, row: TaskRow) -> StartedTask:
    """A started task as recorded (its row has a host and a task directory), for following it
    from a process that did not start it; DispatchError when its host is no longer managed."""
    assert row.host is not None and row.remote_dir is not None
    return StartedTask(task_id=row.id, host=host_spec(context, row.host),
                       task_dir=row.remote_dir, pgid=row.remote_pid, gpu_uuids=(),
                       started_at=row.started_at or 0,
                       timeout_s=row.constraints.get("timeout_s"))


async def create_record(context: FleetContext, request: DispatchRequest, owner: str, *,
                        group_kind: GroupKind | None = None, group_index: int | None = None,
                        group_id: int | None = None) -> int:
    """The task's row (queued with request.wait, else placing); a gang's or array's first
    member (group_kind given, no group_id) becomes the group."""
    from db.tasks import create_task

    def create() -> int:
        with context.database.session() as session:
            return create_task(
                session, name=request.name or request.script.name,
                script=request.shown_script or str(request.script),
                args=request.args, gpus_requested=request.placement.gpus, owner=owner,
                now=now_s(), constraints=request.stored_constraints(),
                priority=request.priority, state="queued" if request.wait else "placing",
                group_kind=group_kind, group_index=group_index, group_id=group_id)

    writing = asyncio.ensure_future(asyncio.to_thread(create))
    try:
        return await asyncio.shield(writing)
    except asyncio.CancelledError:
        # Ctrl-C while the row was being written: the thread writes it all the same, and a
        # row nobody ends stays `placing` (ahead of every waiter) until the reconciler's
        # bound. Wait for it, end it as cancelled, then stop.
        task_id = await writing  # a write that failed raises its own error here instead
        await end_task(context, task_id, "cancelled", "cancelled before it was placed")
        raise


async def record_override(context: FleetContext, task_id: int, owner: str) -> None:
    """The `limits_overridden` event: who lifted the limits, for which task."""
    from db.events import add_event

    await context.write("record the limits override", lambda session: add_event(
        session, ts=int(context.now()), kind="limits_overridden", severity="warning",
        message=f"task {task_id} of {owner} ignores the limits (--override-limits)",
        task_id=task_id, data={"owner": owner}))


async def check_queue_limit(context: FleetContext, placement: PlacementService,
                             owner: str) -> None:
    """LimitReached (exit 7, nothing recorded) when `owner` has their most queued tasks."""
    from db.task_runs import queued_count
    from fleet.placement.limits import check_queued

    limits = placement.user_limits(owner)
    if limits.value("max_queued_per_user") is not None:
        check_queued(limits, await context.read(
            "count queued tasks", lambda session: queued_count(session, owner)))


def task_placement(context: FleetContext, request: PlacementRequest) -> PlacementRequest:
    """`request` without the inventory's `connection: local` hosts: a task runs over SSH only
    (TaskHost.open refuses a local host), so placing one there failed after the claim."""
    local = frozenset(spec.name for spec in context.inventory.hosts
                      if spec.connection == "local")
    if not local:
        return request
    return replace(request, exclude_hosts=frozenset(request.exclude_hosts) | local)


async def claim_for(context: FleetContext, placement: PlacementService,
                    request: DispatchRequest, task_id: int, owner: str,
                    on_wait: Callable[[str], None] | None = None) -> Claim:
    """Place and claim now, or (with request.wait) wait in the queue; ends the task on failure."""
    request = replace(request, placement=task_placement(context, request.placement))
    try:
        if request.wait:
            from fleet.dispatch.queue import wait_and_claim

            return await wait_and_claim(context, placement, request.placement, task_id, owner,
                                        timeout_s=request.queue_timeout_s, on_wait=on_wait,
                                        override_limits=request.override_limits)
        return await placement.place_and_claim(
            request.placement, owner=owner, task_id=task_id,
            limits=None if request.override_limits else placement.user_limits(owner))
    except NoPlacement as exc:
        await end_task(context, task_id, "failed", f"no placement: {exc}")
        raise
    except asyncio.CancelledError as exc:
        if not (request.wait and exc.args == (KEEP_QUEUED,) and await still_queued(
                context, task_id)):
            await end_task(context, task_id, "cancelled", f"not started: {exc}" if str(exc)
                       else "cancelled")
        raise
    except BaseException as exc:
        state = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
        await end_task(context, task_id, state, f"not started: {exc}" if str(exc) else state)
        raise


async def still_queued(context: FleetContext, task_id: int) -> bool:
    row = await asyncio.shield(asyncio.to_thread(records.load, context.database, task_id))
    return row.state == "queued"


async def resume(context: FleetContext, placement: PlacementService, request: DispatchRequest,
                 task_id: int, owner: str) -> tuple[StartedTask, TaskHost]:
    """Claim (waiting in the queue) and start a task recorded earlier and still queued."""
    claim = await claim_for(context, placement, request, task_id, owner)
    return await start_claimed(context, request, task_id, claim)


async def end_task(context: FleetContext, task_id: int, state: str, error: str) -> None:
    """End a task that never ran (its GPUs released), shielded from cancellation."""
    ending = Ending(state, None, error, now_s(), None)  # type: ignore[arg-type]
    await asyncio.shield(asyncio.to_thread(records.finish, context.database, task_id, ending))


async def start_claimed(context: FleetContext, request: DispatchRequest, task_id: int,
                        claim: Claim) -> tuple[StartedTask, TaskHost]:
    """Start a claimed task on its host; on any failure the task is ended (GPUs released)."""
    spec = host_spec(context, claim.host)
    uuids = tuple(claim.cuda_visible_devices.split(","))
    database = context.database
    host: TaskHost | None = None
    launched = False
    task_dir: str | None = None
    # `fleet cancel` may end the task at any step here. Each step that records moves it on
    # only from the state the previous one left (compare-and-set), and the last check comes
    # after the task directory is recorded: a cancel after that reads the directory and
    # marks it on the host, where the wrapper then runs nothing (wrapper.py).
    try:
        if not await asyncio.to_thread(records.set_host, database, task_id, claim.host):
            raise cancelled_elsewhere(task_id)
        launch = request.launch(task_id, spec.python, uuids)
        host = await TaskHost.open(spec, context.ssh_options, context.connections)
        if request.environment is not None:  # refused here, before any upload, if unusable
            from fleet.dispatch.environment_check import ready_on_host

            request = await ready_on_host(database, host, request, task_id)
            launch = request.launch(task_id, spec.python, uuids)
        task_dir = await host.make_dir(TASKS_BASE, task_dir_name(task_id))
        if not await asyncio.to_thread(records.set_fields, database, task_id,
                                       from_states=("starting",), remote_dir=task_dir):
            raise cancelled_elsewhere(task_id)
        await host.upload(launch, task_dir)
        if (await asyncio.to_thread(records.load, database, task_id)).state != "starting":
            raise cancelled_elsewhere(task_id)
        launched = True
        pgid = await host.launch(task_dir)
        started_at = now_s()
        if not await asyncio.to_thread(records.started, database, task_id, pgid=pgid,
                                       started_at=started_at):
            raise cancelled_elsewhere(task_id)
        await asyncio.to_thread(records.checked, database, task_id)
    except BaseException as exc:
        await abort_start(context, task_id, host, task_dir if launched else None, exc)
        raise
    started = StartedTask(task_id=task_id, host=spec, task_dir=task_dir, pgid=pgid,
                          gpu_uuids=uuids, started_at=started_at,
                          timeout_s=request.timeout_s, claim=claim,
                          gpu_indices=tuple(claim.gpu_indices))
    return started, host


def cancelled_elsewhere(task_id: int) -> TaskCancelled:
    """The error for a start whose task was ended from elsewhere (`fleet cancel`) meanwhile."""
    return TaskCancelled(f"task {task_id} was cancelled before it started")


async def abort_start(context: FleetContext, task_id: int, host: TaskHost | None,
                       launched_dir: str | None, exc: BaseException) -> None:
    """End a task whose start failed or was interrupted; stop it on the host if it began."""
    cancelled = isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)
    if host is not None and launched_dir is not None:
        # If this fails the reconciler still finds the task by its remote_dir.
        with contextlib.suppress(FleetError):
            await asyncio.shield(cancel_remote(host, launched_dir, 1.0))
    if host is not None:
        host.close(broken=isinstance(exc, HostError))
    await end_task(context, task_id, "cancelled" if cancelled else "failed",
               "cancelled while starting" if cancelled else f"could not start: {exc}")


async def admit(context: FleetContext, placement: PlacementService, request: DispatchRequest,
                *, queued: bool) -> str:
    """Refuse bad input before anything is recorded (script, files, env, policy, and with
    `queued` the owner's queue limit unless overridden); the submission's owner."""
    from fleet.placement.reservations import current_owner
    from fleet.placement.scoring.policies import resolve_policy

    request.validate()
    resolve_policy(request.placement.policy)
    owner = request.owner or current_owner()
    if queued and not request.override_limits:
        await check_queue_limit(context, placement, owner)
    return owner


async def submit(context: FleetContext, placement: PlacementService, request: DispatchRequest,
                 *, on_wait: Callable[[str], None] | None = None,
                 on_recorded: Callable[[int], None] | None = None
                 ) -> tuple[StartedTask, TaskHost]:
    """Record, claim (or queue) and start a task; returns it running and its open host.

    Bad input (script, files, environment, placement policy) is refused before a task row is
    written; `on_recorded(task_id)` is called once the row exists.
    """
    owner = await admit(context, placement, request, queued=request.wait)
    task_id = await create_record(context, request, owner)
    try:
        if request.override_limits:
            await record_override(context, task_id, owner)
        if on_recorded is not None:
            on_recorded(task_id)
    except asyncio.CancelledError:  # before claim_for, which ends the task itself
        await end_task(context, task_id, "cancelled", "cancelled before it was placed")
        raise
    claim = await claim_for(context, placement, request, task_id, owner, on_wait)
    return await start_claimed(context, request, task_id, claim)


async def attend(
    context: FleetContext,
    started: StartedTask,
    host: TaskHost | None,
    *,
    on_output: Callable[[bytes], None],
    stop: asyncio.Event | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    lost_after_s: float = DEFAULT_LOST_AFTER_S,
    offset: int = 0,
    policy: PollPolicy | None = None,
    detach_on_stop: bool = False,
) -> Ending | None:
    """Follow a running task to its end and record the end.

    When `stop` is set the task is cancelled, or with `detach_on_stop` left running (None).
    """
    link = HostLink(started.host, context.ssh_options, host, context.connections)
    database = context.database
    last_check = [time.monotonic()]

    def contact() -> None:
        if time.monotonic() - last_check[0] >= 30:
            last_check[0] = time.monotonic()
            records.checked(database, started.task_id)

    try:
        end = await follow_task(link, started.task_dir, on_output=on_output, offset=offset,
                                stop=stop, lost_after_s=lost_after_s, policy=policy,
                                on_contact=contact)
        if end is None and detach_on_stop:
            return None
        if end is None:
            end = await _cancel_with_retries(link, started.task_dir, grace_s, lost_after_s)
        ending = _ending_of(end, started.timeout_s)
        await asyncio.to_thread(records.finish, database, started.task_id, ending)
        return await asyncio.to_thread(_recorded_ending, context, started.task_id, ending)
    finally:
        link.close()


async def _cancel_with_retries(link: HostLink, task_dir: str, grace_s: float,
                               lost_after_s: float) -> FollowEnd:
    deadline = time.monotonic() + max(lost_after_s, grace_s)
    while True:
        try:
            status = await cancel_remote(await link.get(), task_dir, grace_s)
            return FollowEnd(replace(status, cancelled=True))
        except HostError as exc:
            link.drop()
            if time.monotonic() >= deadline:
                return FollowEnd(None, f"could not cancel, host unreachable: {exc.detail}")
            await asyncio.sleep(1.0)


def _ending_of(end: FollowEnd, timeout_s: float | None) -> Ending:
    if end.status is None:
        return Ending("lost", None, end.lost_reason, now_s(), None)
    return ending_from_status(end.status, now=now_s(), timeout_s=timeout_s)


def _recorded_ending(context: FleetContext, task_id: int, fallback: Ending) -> Ending:
    """The ending the database holds (another process may have ended the task first)."""
    row = records.load(context.database, task_id)
    if row.state not in ("succeeded", "failed", "cancelled", "lost"):
        return fallback
    return Ending(row.state, row.exit_code, row.error, row.ended_at or fallback.ended_at,  # type: ignore[arg-type]
                  fallback.duration_s, timed_out=row.timed_out)
