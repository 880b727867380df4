"""The dispatch part of the public `Fleet` service API (mixed into fleet.service.Fleet).

    from fleet.dispatch.lifecycle import DispatchRequest
    from fleet.placement.request import PlacementRequest

    async with fleet.open() as f:
        request = DispatchRequest(Path("train.py"), PlacementRequest(gpus=2), args=("--lr", "3e-4"))
        started, ending = await f.dispatch(request, on_output=sys.stdout.buffer.write)
        print(started.task_id, ending.state, ending.exit_code)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fleet.errors import DispatchError

if TYPE_CHECKING:
    from db.engine import Database
    from db.tasks import TaskRow
    from fleet.dispatch.fanout_run import HostRunResult, RunCommand, RunProgress
    from fleet.dispatch.lifecycle import DispatchRequest, StartedTask
    from fleet.dispatch.reconcile import ReconcileReport
    from fleet.dispatch.records import Ending
    from fleet.inventory import Inventory
    from fleet.service import Fleet
    from fleet.ssh.options import SshOptions

OutputCallback = Callable[[bytes], None]


class DispatchAPI:
    """Dispatch operations of the Fleet service; state lives on the Fleet instance."""

    database: Database
    inventory: Inventory
    ssh_options: SshOptions

    def _fleet(self) -> Fleet:
        from fleet.service import Fleet

        assert isinstance(self, Fleet)
        return self

    async def submit(self, request: DispatchRequest, *,
                     on_wait: Callable[[str], None] | None = None) -> StartedTask:
        """Record, place and claim (or queue with request.wait), and start a task; don't follow.

        Raises NoPlacement (exit 7) when nothing fits, ConfigError for bad input, DispatchError
        or a HostError when it cannot start (the task is then recorded failed, GPUs released).
        """
        from fleet.dispatch.lifecycle import submit

        started, host = await submit(self._fleet(), request, on_wait=on_wait)
        host.close()
        return started

    async def dispatch(
        self,
        request: DispatchRequest,
        *,
        on_output: OutputCallback,
        on_wait: Callable[[str], None] | None = None,
        on_started: Callable[[StartedTask], None] | None = None,
        stop: asyncio.Event | None = None,
        lost_after_s: float | None = None,
    ) -> tuple[StartedTask, Ending]:
        """Submit a task and follow it to its end, streaming its output to `on_output`.

        Setting `stop` cancels the task (SIGTERM, SIGKILL after request.grace_s); before the
        task started, it is recorded cancelled and TaskCancelled (exit code 130) is raised.
        """
        from fleet.dispatch.follow import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.lifecycle import attend, submit, unless_stopped

        started, host = await unless_stopped(submit(self._fleet(), request, on_wait=on_wait),
                                             stop)
        if on_started is not None:
            on_started(started)
        ending = await attend(self._fleet(), started, host, on_output=on_output, stop=stop,
                              grace_s=request.grace_s,
                              lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S)
        assert ending is not None  # attend only detaches when asked to
        return started, ending

    async def follow(self, task_id: int, *, on_output: OutputCallback,
                     stop: asyncio.Event | None = None, follow: bool = True,
                     lost_after_s: float | None = None) -> TaskRow:
        """Print a task's log; with `follow`, keep streaming until it ends (then recorded).

        Setting `stop` stops following (the task keeps running). Returns the task as stored.
        """
        from fleet.dispatch.follow import DEFAULT_LOST_AFTER_S, HostLink, LogReader
        from fleet.dispatch.lifecycle import StartedTask, attend, host_spec

        row = await self.task(task_id)
        if row.remote_dir is None or row.host is None:
            if follow and not row.is_final:
                raise DispatchError(f"task {task_id} has not started yet ({row.state})")
            return row
        spec = host_spec(self._fleet(), row.host)
        if not follow or row.is_final:
            link = HostLink(spec, self.ssh_options)
            try:
                await LogReader(row.remote_dir).drain(await link.get(), on_output)
            finally:
                link.close()
            return row
        started = StartedTask(task_id=row.id, host=spec, task_dir=row.remote_dir,
                              pgid=row.remote_pid, gpu_uuids=(), started_at=row.started_at or 0,
                              timeout_s=row.constraints.get("timeout_s"))
        await attend(self._fleet(), started, None, on_output=on_output, stop=stop,
                     lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S, detach_on_stop=True)
        return await self.task(task_id)

    async def cancel(self, task_id: int, *, grace_s: float = 10.0) -> TaskRow:
        """Cancel a task: dequeue it, or SIGTERM its process group (SIGKILL after `grace_s`)."""
        from fleet.dispatch.cancel import cancel_task

        await cancel_task(self._fleet(), task_id, grace_s=grace_s)
        return await self.task(task_id)

    async def task(self, task_id: int) -> TaskRow:
        """One task as stored; DispatchError if there is none."""
        from fleet.dispatch.records import load

        return await asyncio.to_thread(load, self.database, task_id)

    async def tasks(self, *, states: Sequence[str] | None = None, limit: int | None = None,
                    since: int | None = None) -> list[TaskRow]:
        """Tasks, oldest first (optionally in `states`, submitted since, the newest `limit`)."""
        from db.tasks import list_tasks

        def load() -> list[TaskRow]:
            with self.database.session() as session:
                return list_tasks(session, states=states, limit=limit, since=since)

        return await asyncio.to_thread(load)

    async def reconcile_tasks(self, *, lost_after_s: float | None = None,
                              check_timeout_s: float | None = None) -> ReconcileReport:
        """Check running tasks against their hosts and repair the records (see reconcile.py)."""
        from fleet.dispatch.follow import DEFAULT_LOST_AFTER_S
        from fleet.dispatch.reconcile import DEFAULT_CHECK_TIMEOUT_S, reconcile

        return await reconcile(self._fleet(), lost_after_s=lost_after_s or DEFAULT_LOST_AFTER_S,
                               check_timeout_s=check_timeout_s or DEFAULT_CHECK_TIMEOUT_S)

    async def run_on_hosts(self, command: RunCommand, pattern: str | None = None, *,
                           fanout: int = 64, timeout_s: float = 60.0,
                           progress: RunProgress | None = None) -> list[HostRunResult]:
        """Run a command (or upload and run a script) on every selected host concurrently."""
        from fleet.dispatch.fanout_run import run_on_hosts

        return await run_on_hosts(self._fleet().hosts(pattern), command, self.ssh_options,
                                  fanout=fanout, timeout_s=timeout_s, progress=progress)
