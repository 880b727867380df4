"""A task's event stream from `fleet serve`, turned into the callbacks `Fleet.dispatch` takes.

Ctrl-C (`stop`) before the task started closes the stream, which the server takes as a cancel;
after it started, the client asks the server to cancel it and reads on until its end, as local
mode does. A stream that breaks is ServerUnavailable (exit 9), naming the task, which runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.errors import FleetError, ServerUnavailable
from fleet.wire import dispatch as wire
from fleet.wire import tasks
from fleet.wire.codec import decode
from fleet.wire.errors import ErrorReply, error_from_wire

if TYPE_CHECKING:
    from fleet.client.transport import Transport
    from fleet.dispatch.ending import Ending
    from fleet.dispatch.request import StartedTask
    from fleet.records import TaskRow

OutputCallback = Callable[[bytes], None]


def started_task(event: wire.StartedEvent) -> StartedTask:
    """The StartedTask a `started` event describes (its host as the server names it)."""
    from fleet.dispatch.request import StartedTask
    from fleet.model import HostSpec

    return StartedTask(task_id=event.task_id, host=HostSpec(event.host, event.host),
                       task_dir=event.task_dir, pgid=event.pgid, gpu_uuids=event.gpu_uuids,
                       started_at=event.started_at, timeout_s=event.timeout_s,
                       gpu_indices=event.gpu_indices, explanation=event.explanation,
                       nodes=tuple(started_task(node) for node in event.nodes))


def ending_of(event: wire.EndedEvent) -> Ending:
    """The Ending an `ended` event describes."""
    from fleet.dispatch.ending import Ending

    return Ending(event.state, event.exit_code, event.error, event.ended_at,  # type: ignore[arg-type]
                  event.duration_s, timed_out=event.timed_out)


@dataclass
class DispatchStream:
    """One submission's stream: what it has said so far, and the callbacks to tell."""

    transport: Transport
    on_output: OutputCallback | None = None
    on_wait: Callable[[str], None] | None = None
    on_started: Callable[[StartedTask], None] | None = None
    task_id: int | None = None
    started: StartedTask | None = None
    ending: Ending | None = None

    async def read(self, submitted: wire.SubmitRequest) -> None:
        """Read events until the task ended (or, not following, started)."""
        async with contextlib.aclosing(self.transport.events("tasks", body=submitted)) as events:
            async for event, data in events:
                if event == "submitted":
                    self.task_id = decode(data, wire.SubmittedEvent).task_id
                    if submitted.array is not None and not submitted.follow:
                        return  # a detached array: the server drives it from here
                elif event == "waiting":
                    if self.on_wait is not None:
                        self.on_wait(decode(data, wire.WaitingEvent).message)
                    if submitted.until_queued and not submitted.follow:
                        return  # queued: the server starts it when it fits
                elif event == "started":
                    self.started = started_task(decode(data, wire.StartedEvent))
                    if self.on_started is not None:
                        self.on_started(self.started)
                    if not submitted.follow:
                        return
                elif event == "output" and self.on_output is not None:
                    self.on_output(decode(data, wire.OutputEvent).data)
                elif event == "ended":
                    self.ending = ending_of(decode(data, wire.EndedEvent))
                    return
                elif event == "error":
                    raise error_from_wire(decode(data, ErrorReply).error)
        raise ServerUnavailable("the server ended the stream before the task's end")

    def lost(self, exc: ServerUnavailable) -> ServerUnavailable:
        """`exc`, saying what became of the task."""
        if self.task_id is None:
            return exc
        if self.started is None:
            return ServerUnavailable(f"{exc}; task {self.task_id} had not started (see "
                                     f"`fleet tasks` once the server is back)")
        return ServerUnavailable(f"{exc}; task {self.task_id} goes on running on "
                                 f"{self.started.host.name}: follow it with `fleet logs -f "
                                 f"{self.task_id}`")


async def run_dispatch(stream: DispatchStream, submitted: wire.SubmitRequest,
                       stop: asyncio.Event | None,
                       cancel: Callable[[int], Awaitable[object]]) -> None:
    """Read `stream` to its end; on `stop`, cancel as the module docstring says.

    `cancel(task_id)` is awaited in the background once the task runs (its errors are shown by
    the stream: the task's end says whether it was cancelled).
    """
    from fleet.errors import TaskCancelled

    reader = asyncio.ensure_future(stream.read(submitted))
    stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
    canceller: asyncio.Future[object] | None = None
    try:
        if stopper is not None:
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                if stream.started is None:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
                    raise TaskCancelled("cancelled before the task started")
                canceller = asyncio.ensure_future(cancel(stream.started.task_id))
        await reader
    except ServerUnavailable as exc:
        raise stream.lost(exc) from exc
    finally:
        for pending in (reader, stopper, canceller):
            if pending is not None and not pending.done():
                pending.cancel()
        if canceller is not None and canceller.done() and not canceller.cancelled():
            with contextlib.suppress(FleetError):
                canceller.result()  # the task's recorded end reports what cancel achieved


async def read_log(transport: Transport, task_id: int, *, on_output: OutputCallback,
                   follow: bool, lost_after_s: float | None,
                   stop: asyncio.Event | None) -> TaskRow | None:
    """A task's log through the server; the row at the end, None when `stop` came first."""
    params = {"follow": follow, "lost_after_s": lost_after_s}

    async def read() -> TaskRow:
        async with contextlib.aclosing(transport.events(f"tasks/{task_id}/log", params)) as log:
            async for event, data in log:
                if event == "output":
                    on_output(decode(data, wire.OutputEvent).data)
                elif event == "task":
                    return tasks.task_from_wire(decode(data, tasks.TaskWire))
                elif event == "error":
                    raise error_from_wire(decode(data, ErrorReply).error)
        raise ServerUnavailable(f"the server ended task {task_id}'s log before its end")

    reader = asyncio.ensure_future(read())
    if stop is None:
        return await reader
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if reader.done():
        return reader.result()
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    return None
