"""Job arrays: one submission records one task per index; at most MAX of them run at once.

Every member is recorded `queued` at submission (so `fleet tasks --expand` lists them and
`fleet cancel ARRAY` reaches them all). The dispatching process drives the array: it keeps at
most MAX members (or MAX_WAITERS without %MAX) waiting for GPUs or running, each through the
same queue, claim and start as a lone `--wait` task, in index order. A member the driver is
not yet waiting for has no heartbeat (checked_at 0), so it holds no place in the queue; the
reconciler keeps it while some member of its array has a fresh one, and cancels it otherwise
(the driver went away).

A driver stopped with KEEP_QUEUED (`fleet serve` stopping) leaves its members as they are:
running ones run on, queued ones stay queued (one being placed or started at that moment is
cancelled, as a lone task would be), and the next server drives the array on from its records
(`resume_ids`, then `run_array`, which follows the members already started).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from fleet.dispatch import records
from fleet.dispatch.array_spec import ArraySpec, substitute
from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S, Ending
from fleet.dispatch.gang import Prefixer, cancel_members
from fleet.dispatch.lifecycle import (
    admit,
    attend,
    claim_for,
    record_override,
    start_claimed,
    started_of_row,
    unless_stopped,
)
from fleet.dispatch.records import now_s
from fleet.dispatch.request import KEEP_QUEUED, DispatchRequest, StartedTask
from fleet.errors import ConfigError, FleetError, TaskCancelled

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from db.rows import TaskRow
    from fleet.context import FleetContext
    from fleet.dispatch.remote import TaskHost
    from fleet.services.placement import PlacementService

ARRAY_ENV_NAMES = frozenset({"FLEET_ARRAY_ID", "FLEET_ARRAY_INDEX", "FLEET_ARRAY_SIZE"})
# Members waiting for GPUs or running at once when the array sets no %MAX.
MAX_WAITERS = 32


@dataclass(frozen=True)
class ArrayMember:
    """One index of an array and the request it runs (its arguments filled in)."""

    index: int
    request: DispatchRequest


def plan_members(request: DispatchRequest, spec: ArraySpec,
                 values: Sequence[dict[str, str]] | None, values_name: str = "--array-values"
                 ) -> list[ArrayMember]:
    """Every member's request, placeholders filled; ConfigError before anything is recorded."""
    clash = sorted(name for name, _value in request.env if name in ARRAY_ENV_NAMES)
    if clash:
        raise ConfigError(f"--env {', '.join(clash)}: fleet sets this for array members")
    members = []
    for position, index in enumerate(spec.indices):
        own = values[position] if values is not None else {}
        where = (f"{values_name} line for index {index}" if values is not None
                 else f"--array index {index}")
        args = substitute(request.args, own, index, where=where)
        members.append(ArrayMember(index, replace(request, args=args, wait=True)))
    return members


def _constraints(member: ArrayMember, spec: ArraySpec) -> dict[str, object]:
    return {**member.request.stored_constraints(),
            "array": {"index": member.index, "size": spec.size, "spec": spec.text,
                      "max_running": spec.max_running}}


async def submit_array(context: FleetContext, placement: PlacementService,
                       request: DispatchRequest, spec: ArraySpec,
                       members: Sequence[ArrayMember]) -> list[int]:
    """Record every member `queued` in one transaction; their task ids in index order (the
    first is the array's id)."""
    from db.tasks import create_task, set_group_checked

    owner = await admit(context, placement, request, queued=True)

    def create(session: Session) -> list[int]:
        ids: list[int] = []
        for member in members:
            ids.append(create_task(
                session, name=member.request.name or member.request.script.name,
                script=member.request.shown_script or str(member.request.script),
                args=member.request.args, gpus_requested=member.request.placement.gpus,
                owner=owner, now=now_s(), constraints=_constraints(member, spec),
                priority=member.request.priority, state="queued", group_kind="array",
                group_index=member.index, group_id=ids[0] if ids else None))
        set_group_checked(session, ids[0], 0)  # no heartbeat yet: no place in the queue
        return ids

    ids = await context.write("record the array", create)
    if request.override_limits:
        await record_override(context, ids[0], owner)
    return ids


ArrayEvent = Callable[[str], None]


async def run_array(context: FleetContext, placement: PlacementService, spec: ArraySpec,
                    members: Sequence[ArrayMember], ids: Sequence[int], *,
                    on_output: Callable[[bytes], None], on_event: ArrayEvent,
                    on_started: Callable[[int, StartedTask], None] | None = None,
                    stop: asyncio.Event | None = None,
                    lost_after_s: float = DEFAULT_LOST_AFTER_S) -> list[TaskRow]:
    """Drive the array to its end (at most spec.max_running members at once) and return
    every member as recorded, by index. `stop` cancels the members still to run or running.

    A member an earlier driver started is followed to its end in its turn (it holds its place
    in the window); one that ended or never got its script started is passed over.
    """
    from fleet.placement.reservations import current_owner

    array_id = ids[0]
    window = spec.max_running or min(spec.size, MAX_WAITERS)
    pending = iter(range(len(members)))

    async def attend_member(member: ArrayMember, started: StartedTask,
                            host: TaskHost | None) -> None:
        """Follow a started member to its end, its output prefixed with its index."""
        prefixer = Prefixer(str(member.index), started.host.name, on_output)
        try:
            ending = await attend(context, started, host, on_output=prefixer.write, stop=stop,
                                  grace_s=member.request.grace_s, lost_after_s=lost_after_s)
        finally:
            prefixer.flush()
        assert ending is not None
        on_event(f"array {array_id} index {member.index} (task {started.task_id}) "
                 f"{_said(ending)}")

    async def follow_member(member: ArrayMember, row: TaskRow) -> None:
        try:
            started = started_of_row(context, row)
        except FleetError as exc:
            on_event(f"array {array_id} index {member.index} (task {row.id}): {exc}")
            return
        await attend_member(member, started, None)

    async def run_member(position: int) -> None:
        member, task_id = members[position], ids[position]
        row = await asyncio.to_thread(records.load, context.database, task_id)
        if row.state != "queued":
            if not row.is_final and row.remote_dir is not None and row.host is not None:
                await follow_member(member, row)
            return  # ended (fleet cancel), or never started: the reconciler ends that one
        await asyncio.to_thread(records.checked, context.database, task_id)
        request = replace(member.request, env=(
            *member.request.env, ("FLEET_ARRAY_ID", str(array_id)),
            ("FLEET_ARRAY_INDEX", str(member.index)), ("FLEET_ARRAY_SIZE", str(spec.size))))
        owner = request.owner or current_owner()
        try:
            claim = await unless_stopped(
                claim_for(context, placement, request, task_id, owner), stop)
            started, host = await start_claimed(context, request, task_id, claim)
        except TaskCancelled:
            return
        except FleetError as exc:  # recorded failed already (claim_for / start_claimed)
            on_event(f"array {array_id} index {member.index} (task {task_id}) could not "
                     f"start: {exc}")
            return
        if on_started is not None:
            on_started(member.index, started)
        await attend_member(member, started, host)

    async def worker() -> None:
        for position in pending:
            if stop is not None and stop.is_set():
                return
            await run_member(position)

    kept = False  # stopped with KEEP_QUEUED: the members stay for the next driver
    try:
        await asyncio.gather(*(worker() for _ in range(window)))
    except asyncio.CancelledError as exc:
        kept = exc.args == (KEEP_QUEUED,)
        raise
    finally:
        left = [] if kept else await _unfinished(context, array_id)
        if left:
            with contextlib.suppress(FleetError):
                await asyncio.shield(cancel_members(context, left, 1.0))
    return await _members(context, array_id)


async def resume_ids(context: FleetContext, array_id: int,
                     members: Sequence[ArrayMember]) -> list[int] | None:
    """The task ids of a recorded array's `members` (by index), to drive it on after a stopped
    driver; None when it has no unfinished member (ConfigError when its records do not match
    `members`).

    Its next queued member gets a heartbeat now, so that the reconciler keeps the array's
    queued members until the driver runs (its members' own heartbeats take over from there).
    """
    from db.sql import SessionReader
    from db.task_reads import group_members
    from db.task_runs import mark_checked

    def read(session: Session) -> list[int] | None:
        rows = group_members(SessionReader(session), array_id)
        by_index = {row.group_index: row for row in rows
                    if row.group_kind == "array" and row.group_index is not None}
        if sorted(by_index) != sorted(member.index for member in members):
            raise ConfigError(f"array {array_id}: its recorded members do not match the kept "
                              "submission")
        if all(row.is_final for row in rows):
            return None
        waiting = [row for row in rows if row.state == "queued"]
        if waiting:
            mark_checked(session, waiting[0].id, now_s())
        return [by_index[member.index].id for member in members]

    return await context.write("resume the array", read)


def _said(ending: Ending) -> str:
    detail = f" ({ending.error})" if ending.error and ending.state != "succeeded" else ""
    return f"{ending.state}{detail}"


async def _unfinished(context: FleetContext, array_id: int) -> list[int]:
    return [row.id for row in await _members(context, array_id) if not row.is_final]


async def _members(context: FleetContext, array_id: int) -> list[TaskRow]:
    from db.task_reads import group_members

    return await context.query("read the array", lambda reader: group_members(reader, array_id))


def array_summary(rows: Sequence[TaskRow]) -> tuple[str, int]:
    """A line of counts per state and each failed index, and the exit code of the whole array
    (0 only when every member succeeded; else the lowest failed index's code)."""
    from fleet.render.exit_codes import EXIT_DISPATCH, task_exit_code

    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    failed = [row for row in rows if row.state != "succeeded"]
    text = ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
    if failed:
        shown = "; ".join(f"index {row.group_index}: {row.error or row.state}"
                          for row in failed[:10])
        more = f"; … and {len(failed) - 10} more" if len(failed) > 10 else ""
        text += f" — failed: {shown}{more}"
    if not failed:
        return text, 0
    first = failed[0]
    if first.state == "lost" or first.state in ("queued", "placing", "starting", "running"):
        return text, EXIT_DISPATCH
    return text, task_exit_code(first.state, first.exit_code, first.timed_out)
