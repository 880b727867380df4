"""Repairing task records against their hosts after the controller was away (crash safety).

For each task the database says is `starting` or `running`, the reconciler asks its host:
ended (exit file) → the real exit code and times are recorded and its GPUs released; still
running → its check time is refreshed; vanished → `lost`. A host that does not answer makes its
tasks `lost` once it has been silent longer than the bound (from the task's last successful
check). Queued tasks whose waiting dispatcher stopped refreshing them are cancelled, and tasks
stuck before their start (dispatcher gone) are failed, so no allocation outlives a live task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from db.types import ACTIVE_TASK_STATES
from fleet.dispatch import records
from fleet.dispatch.ending import (
    DEFAULT_LOST_AFTER_S,
    Ending,
    ReconcileReport,
    ending_from_status,
)
from fleet.dispatch.queue import WAITER_STALE_S
from fleet.dispatch.records import now_s
from fleet.errors import DispatchError, HostError

if TYPE_CHECKING:
    from db.rows import TaskRow
    from fleet.context import FleetContext
    from fleet.dispatch.remote import TaskHost
    from fleet.model import HostSpec

# A task in `placing`/`starting` this long without progress lost its dispatcher.
START_STALE_S = 120.0
DEFAULT_CHECK_TIMEOUT_S = 5.0
RECONCILE_FANOUT = 32
# SIGTERM to SIGKILL for the other members of a gang whose member failed while detached.
DEFAULT_GANG_GRACE_S = 10.0


@dataclass(frozen=True)
class _Active:
    """An active task and when its host (or its waiting dispatcher) last checked in."""

    row: TaskRow
    beat: int | None

    @property
    def last_contact(self) -> int:
        known = (self.beat, self.row.started_at, self.row.submitted_at)
        return max(value for value in known if value is not None)


def _active_rows(context: FleetContext) -> list[_Active]:
    from db.task_reads import last_checks, list_tasks

    with context.database.reader() as reader:
        rows = list_tasks(reader, states=ACTIVE_TASK_STATES)
        beats = last_checks(reader, [row.id for row in rows])
    return [_Active(row, beats.get(row.id)) for row in rows]


async def reconcile(
    context: FleetContext,
    *,
    lost_after_s: float = DEFAULT_LOST_AFTER_S,
    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    task_ids: Sequence[int] | None = None,
) -> ReconcileReport:
    """One pass over the active tasks (or just `task_ids`); safe to run from many processes."""
    actives = await asyncio.to_thread(_active_rows, context)
    if task_ids is not None:
        actives = [active for active in actives if active.row.id in set(task_ids)]
    report = ReconcileReport()
    now = now_s()
    remote: dict[str, list[_Active]] = {}
    # Arrays whose driver is alive: some member waits (fresh heartbeat) or runs (checked).
    live_arrays = {active.row.group_id for active in actives
                   if active.row.group_kind == "array" and active.beat
                   and now - active.beat <= WAITER_STALE_S}
    for active in actives:
        row = active.row
        if row.state == "queued":
            if row.group_kind == "array" and row.group_id in live_arrays:
                continue  # waits for its turn in the array
            if now - (active.beat or row.submitted_at) > WAITER_STALE_S:
                await _finish(context, row, Ending("cancelled", None,
                                                   "its waiting dispatcher went away", now, None),
                              report)
        elif row.remote_dir is None or row.host is None:
            if now - active.last_contact > START_STALE_S:
                await _finish(context, row, Ending("failed", None,
                                                   "its dispatcher went away before the start",
                                                   now, None), report)
        elif row.state == "starting" and now - active.last_contact < START_STALE_S:
            continue  # a dispatcher may be uploading right now
        else:
            remote.setdefault(row.host, []).append(active)
    if remote:  # the managed hosts (inventory + adopted) only when a host must be asked
        await context.hosts.refresh()
    gate = asyncio.Semaphore(RECONCILE_FANOUT)

    async def one_host(name: str, tasks: list[_Active]) -> None:
        async with gate:
            await _check_host(context, name, tasks, report, lost_after_s, check_timeout_s)

    await asyncio.gather(*(one_host(name, tasks) for name, tasks in remote.items()))
    await _end_broken_gangs(context, {active.row.group_id for active in actives
                                      if active.row.group_kind == "gang"}, report)
    return report


async def _end_broken_gangs(context: FleetContext, gang_ids: set[int | None],
                            report: ReconcileReport) -> None:
    """Cancel the running members of gangs one of whose members ended badly, or whose rank 0
    succeeded (a detached gang has no dispatcher to do it; for a followed one this races it
    harmlessly)."""
    from db.task_reads import group_members

    for gang_id in sorted(gid for gid in gang_ids if gid is not None):
        members = await context.query("read the gang", partial(group_members, group_id=gang_id))
        leader_done = bool(members) and members[0].group_index == 0 and \
            members[0].state == "succeeded"
        if leader_done or any(m.is_final and m.state != "succeeded" for m in members):
            from fleet.dispatch.gang import cancel_members  # SSH: only when needed

            active = [m.id for m in members if not m.is_final]
            await cancel_members(context, active, DEFAULT_GANG_GRACE_S)
            for member in await context.query("read the gang",
                                              partial(group_members, group_id=gang_id)):
                if member.id in active and member.is_final:
                    report.ended[member.id] = member.state


async def _finish(context: FleetContext, row: TaskRow, ending: Ending,
                  report: ReconcileReport) -> None:
    if await asyncio.to_thread(records.finish, context.database, row.id, ending):
        report.ended[row.id] = ending.state


def _spec(context: FleetContext, name: str) -> HostSpec | None:
    return context.hosts.find(name)


async def _check_host(context: FleetContext, name: str, tasks: list[_Active],
                      report: ReconcileReport, lost_after_s: float, timeout_s: float) -> None:
    from fleet.dispatch.remote import TaskHost

    spec = _spec(context, name)
    try:
        if spec is None:
            raise DispatchError(f"host {name} is no longer in the inventory")
        async with asyncio.timeout(timeout_s + len(tasks) * 2.0):
            host = await TaskHost.open(spec, context.ssh_options, context.connections)
            broken = True
            try:
                for active in tasks:
                    await _check_task(context, host, active.row, report)
                broken = False
            finally:
                host.close(broken=broken)
    except (HostError, DispatchError, TimeoutError) as exc:
        report.unreachable[name] = str(exc) or "timed out"
        now = now_s()
        for active in tasks:
            silent = now - active.last_contact
            if silent > lost_after_s:
                await _finish(context, active.row, Ending(
                    "lost", None, f"host {name} unreachable for {silent}s: {exc}", now, None),
                    report)


async def _check_task(context: FleetContext, host: TaskHost, row: TaskRow,
                      report: ReconcileReport) -> None:
    assert row.remote_dir is not None
    status = await host.status(row.remote_dir)
    database = context.database
    if status.state in ("exited", "gone"):
        timeout = row.constraints.get("timeout_s")
        ending = ending_from_status(status, now=now_s(),
                                    timeout_s=float(timeout) if timeout else None)
        await _finish(context, row, ending, report)
        return
    await asyncio.to_thread(records.checked, database, row.id)
    if row.state == "starting":
        await asyncio.to_thread(records.started, database, row.id, pgid=status.pgid,
                                started_at=row.started_at or now_s())
    report.still_running.append(row.id)
