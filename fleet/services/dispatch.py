"""Tasks: submit, run and follow, cancel, list, reconcile, and fan-out commands on hosts.

    from fleet.dispatch.request import DispatchRequest
    from fleet.placement.request import PlacementRequest

    async with fleet.open() as f:
        request = DispatchRequest(Path("train.py"), PlacementRequest(gpus=2), args=("--lr", "3e-4"))
        started, ending = await f.dispatch(request, on_output=sys.stdout.buffer.write)
        print(started.task_id, ending.state, ending.exit_code, ending.timed_out)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from fleet.errors import ConfigError, DispatchError
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.rows import TaskRow
    from db.sql import SqlReader
    from fleet.caller import Caller
    from fleet.context import FleetContext
    from fleet.dispatch.array import ArrayMember
    from fleet.dispatch.array_spec import ArraySpec
    from fleet.dispatch.ending import Ending, ReconcileReport
    from fleet.dispatch.fanout_run import HostRunResult, RunCommand, RunProgress
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.services.placement import PlacementService

OutputCallback = Callable[[bytes], None]


class DispatchService:
    """Remote tasks from submission to their recorded end."""

    def __init__(self, context: FleetContext, placement: PlacementService) -> None:
        self.context = context
        self.placement = placement

    def _errors(self, action: str) -> AbstractContextManager[None]:
        return storage_errors(action, self.context.database.url)

    async def _as_caller(self, request: DispatchRequest, caller: Caller | None
                         ) -> DispatchRequest:
        """The request as a server caller may make it: owned by them, a built-in policy unless
        they are an admin (a "module:function" policy runs code in the server)."""
        if caller is None:
            return request
        from dataclasses import replace

        from fleet.services.permissions import require_admin

        await self.placement.require_policy(request.placement, caller)
        if request.override_limits:
            await require_admin(self.context, caller, "override limits")
        return replace(request, owner=caller.user)

    async def submit(self, request: DispatchRequest, *,
                     on_wait: Callable[[str], None] | None = None,
                     on_recorded: Callable[[int], None] | None = None,
                     explain: bool = False,
                     caller: Caller | None = None) -> StartedTask:
        """Record, place and claim (or queue with request.wait), and start a task; don't follow.

        Raises NoPlacement (exit 7) when nothing fits, ConfigError for bad input (before any
        task row is written), DispatchError or a HostError when it cannot start (the task is
        then recorded failed, GPUs released). Through the server (`caller` given) the owner is
        the caller's user.
        """
        from fleet.dispatch.lifecycle import submit

        request = await self._as_caller(request, caller)
        if request.is_gang:
            from fleet.dispatch.gang import submit_gang

            with self._errors("submit the gang"):
                gang = await submit_gang(self.context, self.placement, request,
                                         on_wait=on_wait, on_recorded=on_recorded)
            for node_host in gang.hosts:
                node_host.close()
            return _explained(gang.leader) if explain else gang.leader
        with self._errors("submit the task"):
            started, host = await submit(self.context, self.placement, request, on_wait=on_wait,
                                         on_recorded=on_recorded)
        host.close()
        return _explained(started) if explain else started

    async def dispatch(
        self,
        request: DispatchRequest,
        *,
        on_output: OutputCallback,
        on_wait: Callable[[str], None] | None = None,
        on_started: Callable[[StartedTask], None] | None = None,
        stop: asyncio.Event | None = None,
        lost_after_s: float | None = None,
        on_recorded: Callable[[int], None] | None = None,
        explain: bool = False,
        caller: Caller | None = None,
    ) -> tuple[StartedTask, Ending]:
        """Submit a task and follow it to its end, streaming its output to `on_output`.

        Setting `stop` cancels the task (SIGTERM, SIGKILL after request.grace_s); before the
        task started, it is recorded cancelled and TaskCancelled (exit code 130) is raised.
        With `explain`, the started task carries its placement's explanation.
        """
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.lifecycle import attend, submit, unless_stopped

        request = await self._as_caller(request, caller)
        if request.is_gang:
            return await self._dispatch_gang(request, on_output=on_output, on_wait=on_wait,
                                             on_started=on_started, stop=stop,
                                             lost_after_s=lost_after_s, on_recorded=on_recorded,
                                             explain=explain)
        with self._errors("dispatch the task"):
            started, host = await unless_stopped(
                submit(self.context, self.placement, request, on_wait=on_wait,
                       on_recorded=on_recorded), stop)
            if explain:
                started = _explained(started)
            if on_started is not None:
                on_started(started)
            ending = await attend(self.context, started, host, on_output=on_output, stop=stop,
                                  grace_s=request.grace_s,
                                  lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
        assert ending is not None  # attend only detaches when asked to
        return started, ending

    async def dispatch_array(
        self, request: DispatchRequest, spec: ArraySpec, members: Sequence[ArrayMember], *,
        on_output: OutputCallback, on_event: Callable[[str], None],
        on_started: Callable[[int, StartedTask], None] | None = None,
        on_recorded: Callable[[list[int]], None] | None = None,
        stop: asyncio.Event | None = None, lost_after_s: float | None = None,
        detach: bool = False, caller: Caller | None = None,
    ) -> tuple[int, list[TaskRow]]:
        """Record a job array (fleet.dispatch.array.plan_members made `members`) and drive it
        to its end, at most spec.max_running members at once; (array id, members by index).

        This process drives the array, so `detach` is refused (ConfigError, before anything
        is recorded); through `fleet serve` (RemoteFleet) the server drives a detached one.
        """
        from dataclasses import replace

        from fleet.dispatch.array import run_array, submit_array
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S

        if detach:
            raise ConfigError("--array --detach needs fleet serve, which drives the array; "
                              "without it the dispatching process does: keep it running (tmux)")

        request = await self._as_caller(request, caller)
        if caller is not None:
            members = [replace(m, request=replace(m.request, owner=caller.user))
                       for m in members]
        with self._errors("dispatch the array"):
            ids = await submit_array(self.context, self.placement, request, spec, members)
            if on_recorded is not None:
                on_recorded(ids)
            rows = await run_array(self.context, self.placement, spec, members, ids,
                                   on_output=on_output, on_event=on_event,
                                   on_started=on_started, stop=stop,
                                   lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
        return ids[0], rows

    async def resume_array(self, spec: ArraySpec, members: Sequence[ArrayMember], array_id: int,
                           *, on_event: Callable[[str], None],
                           lost_after_s: float | None = None) -> list[TaskRow] | None:
        """Drive on to its end an array a stopped `fleet serve` left unfinished (each member's
        request names its owner); its members as recorded, or None when none was left."""
        from fleet.dispatch.array import resume_ids, run_array
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S

        with self._errors("resume the array"):
            ids = await resume_ids(self.context, array_id, members)
            if ids is None:
                return None
            return await run_array(self.context, self.placement, spec, members, ids,
                                   on_output=lambda _data: None, on_event=on_event,
                                   lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)

    async def _dispatch_gang(
        self, request: DispatchRequest, *, on_output: OutputCallback,
        on_wait: Callable[[str], None] | None, on_started: Callable[[StartedTask], None] | None,
        stop: asyncio.Event | None, lost_after_s: float | None,
        on_recorded: Callable[[int], None] | None, explain: bool,
    ) -> tuple[StartedTask, Ending]:
        """`dispatch` for a gang: every node started, followed with prefixed output, and the
        gang's ending (its first failure's) returned with rank 0 (which carries every node)."""
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.gang import attend_gang, submit_gang
        from fleet.dispatch.lifecycle import unless_stopped

        with self._errors("dispatch the gang"):
            gang = await unless_stopped(
                submit_gang(self.context, self.placement, request, on_wait=on_wait,
                            on_recorded=on_recorded), stop)
            started = _explained(gang.leader) if explain else gang.leader
            if on_started is not None:
                on_started(started)
            ending = await attend_gang(self.context, gang, on_output=on_output, stop=stop,
                                       grace_s=request.grace_s,
                                       lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
        assert ending is not None  # attend_gang only detaches when asked to
        return started, ending

    async def resume_queued(self, request: DispatchRequest, task_id: int, *,
                            on_started: Callable[[StartedTask], None] | None = None,
                            lost_after_s: float | None = None) -> Ending:
        """Wait in the queue for, start and follow to its end a task recorded earlier and
        still queued (a stopped `fleet serve` left it: request.owner is its owner)."""
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.lifecycle import attend, resume
        from fleet.placement.reservations import current_owner

        owner = request.owner or current_owner()
        if request.is_gang:
            from fleet.dispatch.gang import attend_gang, resume_gang

            with self._errors("resume the gang"):
                gang = await resume_gang(self.context, self.placement, request, task_id, owner)
                if on_started is not None:
                    on_started(gang.leader)
                ending = await attend_gang(self.context, gang, on_output=lambda _data: None,
                                           grace_s=request.grace_s,
                                           lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
            assert ending is not None  # attend_gang only detaches when asked to
            return ending
        with self._errors("resume the task"):
            started, host = await resume(self.context, self.placement, request, task_id, owner)
            if on_started is not None:
                on_started(started)
            ending = await attend(self.context, started, host, on_output=lambda _data: None,
                                  grace_s=request.grace_s,
                                  lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
        assert ending is not None  # attend only detaches when asked to
        return ending

    async def follow(self, task_id: int, *, on_output: OutputCallback,
                     stop: asyncio.Event | None = None, follow: bool = True,
                     lost_after_s: float | None = None,
                     caller: Caller | None = None) -> TaskRow:
        """Print a task's log; with `follow`, keep streaming until it ends (then recorded).

        Setting `stop` stops following (the task keeps running). Returns the task as stored.
        A `caller` who is not an admin may read only their own tasks' logs.
        """
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.follow import HostLink, LogReader
        from fleet.dispatch.lifecycle import attend, host_spec, started_of_row
        from fleet.services.permissions import require_owner

        row = await self.task(task_id)
        await require_owner(self.context, caller, f"read the log of task {task_id}", [row.owner])
        if row.group_kind == "gang" and row.group_id == row.id:
            with self._errors("follow the gang"):
                await self._follow_gang(row, on_output=on_output, stop=stop, follow=follow,
                                        lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
            return await self.task(task_id)
        if row.remote_dir is None or row.host is None:
            if follow and not row.is_final:
                raise DispatchError(f"task {task_id} has not started yet ({row.state})")
            return row
        spec = host_spec(self.context, row.host)
        if not follow or row.is_final:
            link = HostLink(spec, self.context.ssh_options, pool=self.context.connections)
            try:
                await LogReader(row.remote_dir).drain(await link.get(), on_output)
            finally:
                link.close()
            return row
        started = started_of_row(self.context, row)
        with self._errors("follow the task"):
            await attend(self.context, started, None, on_output=on_output, stop=stop,
                         lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S, detach_on_stop=True)
        return await self.task(task_id)

    async def _follow_gang(self, gang: TaskRow, *, on_output: OutputCallback,
                           stop: asyncio.Event | None, follow: bool, lost_after_s: float) -> None:
        """Every node's log with `[rank/host]` prefixes; with `follow`, live until the gang
        ends (a failing node has the others cancelled, as when dispatched)."""
        from fleet.dispatch.follow import HostLink, LogReader
        from fleet.dispatch.gang import Prefixer, attend_gang
        from fleet.dispatch.lifecycle import host_spec, started_of_row

        members = await self.members(gang.id)
        started = [m for m in members if m.remote_dir is not None and m.host is not None]
        if not follow or all(member.is_final for member in members):
            for rank, member in enumerate(members):
                if member.remote_dir is None or member.host is None:
                    continue
                prefixer = Prefixer(member.group_index or rank, member.host, on_output)
                link = HostLink(host_spec(self.context, member.host), self.context.ssh_options,
                                pool=self.context.connections)
                try:
                    await LogReader(member.remote_dir).drain(await link.get(), prefixer.write)
                finally:
                    prefixer.flush()
                    link.close()
            return
        if len(started) < len(members):
            raise DispatchError(f"gang {gang.id} has not started yet ({gang.state})")
        nodes = [started_of_row(self.context, member) for member in started]
        await attend_gang(self.context, nodes, on_output=on_output, stop=stop,
                          grace_s=float(gang.constraints.get("grace_s") or 10.0),
                          lost_after_s=lost_after_s, detach_on_stop=True)

    async def members(self, group_id: int) -> list[TaskRow]:
        """The tasks of a gang (by rank) or array (by index); [] for a lone task."""
        from db.task_reads import group_members

        return await self.context.query("read the group's tasks",
                                        lambda reader: group_members(reader, group_id))

    async def cancel(self, task_id: int, *, grace_s: float = 10.0,
                     caller: Caller | None = None) -> TaskRow:
        """Cancel a task: dequeue it, or SIGTERM its process group (SIGKILL after `grace_s`).

        A gang's or array's id cancels every member not yet ended. A `caller` who is not an
        admin may cancel only their own tasks (PermissionDenied).
        """
        from fleet.dispatch.cancel import cancel_task
        from fleet.dispatch.gang import cancel_members
        from fleet.services.permissions import require_owner

        row = await self.task(task_id)
        if caller is not None:
            await require_owner(self.context, caller, f"cancel task {task_id}", [row.owner])
        with self._errors("cancel the task"):
            if row.group_kind is not None and row.group_id == row.id:
                members = [m.id for m in await self.members(task_id) if not m.is_final]
                await cancel_members(self.context, members, grace_s)
            else:
                await cancel_task(self.context, task_id, grace_s=grace_s)
        return await self.task(task_id)

    async def task(self, task_id: int) -> TaskRow:
        """One task as stored; ConfigError (exit 2) naming it if there is none."""
        from fleet.dispatch.records import load

        database = self.context.database
        return await self.context.call("read the task", lambda: load(database, task_id))

    async def tasks(self, *, states: Sequence[str] | None = None, limit: int | None = None,
                    since: int | None = None) -> list[TaskRow]:
        """Tasks, oldest first (optionally in `states`, submitted since, the newest `limit`)."""
        from db.task_reads import list_tasks

        def load(reader: SqlReader) -> list[TaskRow]:
            return list_tasks(reader, states=states, limit=limit, since=since)

        return await self.context.query("list tasks", load)

    async def reconcile_tasks(self, *, lost_after_s: float | None = None,
                              check_timeout_s: float | None = None) -> ReconcileReport:
        """Check running tasks against their hosts and repair the records (see reconcile.py)."""
        from fleet.dispatch.ending import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.reconcile import DEFAULT_CHECK_TIMEOUT_S, reconcile

        with self._errors("reconcile tasks"):
            return await reconcile(self.context,
                                   lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S,
                                   check_timeout_s=check_timeout_s or DEFAULT_CHECK_TIMEOUT_S)

    async def run_on_hosts(self, command: RunCommand, pattern: str | None = None, *,
                           fanout: int = 64, timeout_s: float = 60.0,
                           progress: RunProgress | None = None) -> list[HostRunResult]:
        """Run a command (or upload and run a script) on every selected host concurrently."""
        from fleet.dispatch.fanout_run import run_on_hosts
        from fleet.inventory import select_hosts

        specs = select_hosts(await self.context.hosts.refresh(), pattern)
        return await run_on_hosts(specs, command, self.context.ssh_options,
                                  fanout=fanout, timeout_s=timeout_s, progress=progress)


def _explained(started: StartedTask) -> StartedTask:
    """The started task with its placement's explanation (fleet.render.explain)."""
    from dataclasses import replace

    from fleet.render.explain import render_explain

    claim = started.claim
    if claim is None or claim.placement is None:
        return started
    return replace(started, explanation=render_explain(claim.placement))
