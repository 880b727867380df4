"""RemoteFleet's task submissions: submit, queue, dispatch, arrays and logs through `fleet
serve` (the owner is the caller's Unix user)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from fleet.errors import ServerUnavailable

if TYPE_CHECKING:
    from fleet.client.transport import Transport
    from fleet.dispatch.array import ArrayMember
    from fleet.dispatch.array_spec import ArraySpec
    from fleet.dispatch.ending import Ending
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.records import TaskRow


class _Remote(Protocol):
    """What the submissions use of the RemoteFleet they are part of."""

    transport: Transport

    async def cancel(self, task_id: int, *, grace_s: float = 10.0) -> TaskRow: ...

    async def members(self, group_id: int) -> list[TaskRow]: ...

    async def task(self, task_id: int) -> TaskRow: ...


class RemoteSubmissions:
    """The task methods of RemoteFleet (as `Fleet`'s, same names and types)."""

    async def submit(self: _Remote, request: DispatchRequest, *,
                     on_wait: Callable[[str], None] | None = None,
                     on_recorded: Callable[[int], None] | None = None,
                     explain: bool = False) -> StartedTask:
        """Hand a task to the server, which places it (or queues it with request.wait) and
        starts it; returns once it runs (as `Fleet.submit`)."""
        from fleet.client.task_stream import DispatchStream
        from fleet.dispatch.staging import pack

        stream = DispatchStream(self.transport, on_wait=on_wait)
        submitted = pack(request, follow=False, explain=explain)
        try:
            await stream.read(submitted)
        except ServerUnavailable as exc:
            raise stream.lost(exc) from exc
        assert stream.started is not None  # read() returns at `started` when not following
        return stream.started

    async def enqueue(self: _Remote, request: DispatchRequest, *,
                      on_wait: Callable[[str], None] | None = None, explain: bool = False
                      ) -> tuple[int, StartedTask | None]:
        """Hand a task to the server to queue (`--wait --detach`): returns once it waits in
        the server's queue (None) or runs (its StartedTask), with its id; the server starts
        a queued task when it fits, whether or not this client is still there."""
        from dataclasses import replace

        import msgspec

        from fleet.client.task_stream import DispatchStream
        from fleet.dispatch.staging import pack

        stream = DispatchStream(self.transport, on_wait=on_wait)
        submitted = msgspec.structs.replace(pack(replace(request, wait=True), follow=False,
                                                 explain=explain),
                                            until_queued=True)
        try:
            await stream.read(submitted)
        except ServerUnavailable as exc:
            raise stream.lost(exc) from exc
        assert stream.task_id is not None
        return stream.task_id, stream.started

    async def dispatch(
        self: _Remote,
        request: DispatchRequest,
        *,
        on_output: Callable[[bytes], None],
        on_wait: Callable[[str], None] | None = None,
        on_started: Callable[[StartedTask], None] | None = None,
        stop: asyncio.Event | None = None,
        lost_after_s: float | None = None,
        explain: bool = False,
    ) -> tuple[StartedTask, Ending]:
        """Hand a task to the server and stream it to its end (as `Fleet.dispatch`): the server
        uploads the files over its open connection, starts the task and records its end."""
        from fleet.client.task_stream import DispatchStream, run_dispatch
        from fleet.dispatch.staging import pack

        stream = DispatchStream(self.transport, on_output, on_wait, on_started)
        submitted = pack(request, follow=True, explain=explain, lost_after_s=lost_after_s)
        await run_dispatch(stream, submitted, stop,
                           lambda task_id: self.cancel(task_id, grace_s=request.grace_s))
        assert stream.started is not None and stream.ending is not None
        return stream.started, stream.ending

    async def dispatch_array(
        self: _Remote, request: DispatchRequest, spec: ArraySpec, members: Sequence[ArrayMember], *,
        on_output: Callable[[bytes], None], on_event: Callable[[str], None],
        stop: asyncio.Event | None = None, lost_after_s: float | None = None,
        detach: bool = False,
    ) -> tuple[int, list[TaskRow]]:
        """Hand a job array to the server, which records and drives it; stream it to its end
        (as `Fleet.dispatch_array`; with `detach`, only until it is recorded). Setting `stop`
        cancels the array's unfinished members."""
        import msgspec

        from fleet.client.task_stream import DispatchStream
        from fleet.dispatch.staging import pack
        from fleet.wire.dispatch import ArraySubmit

        stream = DispatchStream(self.transport, on_output, on_event)
        submitted = msgspec.structs.replace(
            pack(request, follow=not detach, lost_after_s=lost_after_s),
            array=ArraySubmit(spec.text, tuple(member.request.args for member in members)))
        reader = asyncio.ensure_future(stream.read(submitted))
        stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
        try:
            if stopper is not None:
                await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not reader.done() and stream.task_id is not None:
                    await self.cancel(stream.task_id, grace_s=request.grace_s)
            await reader
        except ServerUnavailable as exc:
            raise stream.lost(exc) from exc
        finally:
            for pending in (reader, stopper):
                if pending is not None and not pending.done():
                    pending.cancel()
        assert stream.task_id is not None  # read() returned at `ended`, after `submitted`
        return stream.task_id, await self.members(stream.task_id)

    async def follow(self: _Remote, task_id: int, *, on_output: Callable[[bytes], None],
                     stop: asyncio.Event | None = None, follow: bool = True,
                     lost_after_s: float | None = None) -> TaskRow:
        """A task's log (your own, or anyone's as an admin); with `follow` until it ends.
        Setting `stop` stops following (the task keeps running)."""
        from fleet.client.task_stream import read_log

        row = await read_log(self.transport, task_id, on_output=on_output, follow=follow,
                             lost_after_s=lost_after_s, stop=stop)
        return row if row is not None else await self.task(task_id)
