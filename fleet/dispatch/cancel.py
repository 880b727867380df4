"""`fleet cancel`: take a task out of the queue, or stop its remote process group and record it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fleet.dispatch import records
from fleet.dispatch.ending import Ending, ending_from_status
from fleet.dispatch.follow import cancel_remote
from fleet.dispatch.lifecycle import host_spec
from fleet.dispatch.records import now_s
from fleet.dispatch.remote import TaskHost

if TYPE_CHECKING:
    from fleet.context import FleetContext


async def cancel_task(context: FleetContext, task_id: int, *, grace_s: float) -> str:
    """Cancel one task; returns its final state (unchanged if it had already ended).

    Queued, placing, or starting with no task directory yet: ended `cancelled` at once (its
    dispatcher stops at its next step). Once the task directory is recorded: marked cancelled
    on the host (a wrapper that has not run the command yet never runs it), SIGTERM to its
    process group, SIGKILL after `grace_s`, then recorded with the exit code the host
    reports. A HostError leaves the task as it is (the reconciler marks it lost if the host
    stays unreachable).
    """
    row = await asyncio.to_thread(records.load, context.database, task_id)
    if row.is_final:
        return row.state
    if row.remote_dir is None or row.host is None:
        # Ended in the database only while its dispatcher has not recorded a task directory
        # (checked in the same statement); once it has, the host must be told as well.
        ending = Ending("cancelled", None, "cancelled before it started", now_s(), None)
        if await asyncio.to_thread(records.finish, context.database, task_id, ending,
                                   unlaunched_only=True):
            return "cancelled"
        row = await asyncio.to_thread(records.load, context.database, task_id)
        if row.is_final or row.remote_dir is None or row.host is None:
            return row.state
    async with await TaskHost.open(host_spec(context, row.host), context.ssh_options,
                                   context.connections) as host:
        status = await cancel_remote(host, row.remote_dir, grace_s)
    timeout = row.constraints.get("timeout_s")
    ending = ending_from_status(status, now=now_s(),
                                timeout_s=float(timeout) if timeout else None)
    await asyncio.to_thread(records.finish, context.database, task_id, ending)
    return (await asyncio.to_thread(records.load, context.database, task_id)).state
