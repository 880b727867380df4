"""Dispatches the server runs for its clients: each a task of its own, streaming to its client.

A job outlives its request: once the task runs, a client that goes away (killed, or its
connection lost) leaves the task running and the server follows it to its end and records it.
A client that goes away before its task started (still queued or placing) has nobody waiting
for the task, so the job cancels it, as Ctrl-C does in local mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.errors import FleetError, ServerUnavailable
from fleet.server.stream import sse_frame
from fleet.wire import dispatch as wire
from fleet.wire import errors as wire_errors
from fleet.wire.codec import encode

if TYPE_CHECKING:
    from fleet.caller import Caller
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.service import Fleet

log = logging.getLogger(__name__)

# Frames that may wait for one client; a client further behind is dropped (the job goes on).
JOB_QUEUE_FRAMES = 256


@dataclass(eq=False)
class DispatchJob:
    """One client's dispatch: the frames for its stream, and what the job knows of the task."""

    frames: asyncio.Queue[bytes | None] = field(
        default_factory=lambda: asyncio.Queue(JOB_QUEUE_FRAMES))
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task_id: int | None = None
    started: bool = False
    client_gone: bool = False

    def emit(self, event: str, value: object) -> None:
        """Queue one event for the client; a client that fell behind is let go."""
        if self.client_gone:
            return
        try:
            self.frames.put_nowait(sse_frame(event, encode(value)))
        except asyncio.QueueFull:
            log.info("task %s: its client fell %d events behind; the task goes on",
                     self.task_id, JOB_QUEUE_FRAMES)
            self.leave()

    def finish(self) -> None:
        """The stream's last frame has been queued."""
        if not self.client_gone:
            with contextlib.suppress(asyncio.QueueFull):
                self.frames.put_nowait(None)

    def leave(self) -> None:
        """The client is gone: before the task started, that cancels it."""
        self.client_gone = True
        if not self.started:
            self.stop.set()


class Jobs:
    """The running jobs and the private directory their files are staged in."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()
        self._root: Path | None = None

    def staging_dir(self) -> Path:
        """A new empty directory (0700) for one submission's files."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="fleet-serve-staging-"))
        return Path(tempfile.mkdtemp(dir=self._root))

    def start(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` on its own, kept until it ends."""
        job = asyncio.create_task(work, name=name)
        self.running.add(job)
        job.add_done_callback(self.running.discard)

    async def close(self) -> None:
        """Stop following (server stopping): started tasks run on; reconcile records them."""
        for job in list(self.running):
            job.cancel()
        if self.running:
            await asyncio.wait(list(self.running), timeout=10.0)
        if self._root is not None:
            remove_tree(self._root)


def remove_tree(path: Path) -> None:
    """Remove staged files, saying so in the log if that fails."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("could not remove staged files %s: %s", path, exc)


def started_event(started: StartedTask) -> wire.StartedEvent:
    """What the client is told when its task runs."""
    return wire.StartedEvent(
        task_id=started.task_id, host=started.host.name, task_dir=started.task_dir,
        pgid=started.pgid, gpu_uuids=started.gpu_uuids, gpu_indices=started.gpu_indices,
        started_at=started.started_at, timeout_s=started.timeout_s,
        explanation=started.explanation)


async def run_dispatch(fleet: Fleet, job: DispatchJob, request: DispatchRequest,
                       submitted: wire.SubmitRequest, caller: Caller, staged: Path) -> None:
    """Submit the task for `caller`, stream its events to `job`, and (when following) record
    its end whether or not the client is still there."""
    from fleet.dispatch.lifecycle import unless_stopped

    def recorded(task_id: int) -> None:
        job.task_id = task_id
        job.emit("submitted", wire.SubmittedEvent(task_id))

    def on_started(started: StartedTask) -> None:
        job.started = True
        remove_tree(staged)  # uploaded: the host has its copy
        job.emit("started", started_event(started))

    def on_wait(message: str) -> None:
        job.emit("waiting", wire.WaitingEvent(message))

    try:
        if submitted.follow:
            _started, ending = await fleet.dispatch(
                request, on_output=lambda data: job.emit("output", wire.OutputEvent(data)),
                on_wait=on_wait, on_started=on_started, on_recorded=recorded, stop=job.stop,
                lost_after_s=submitted.lost_after_s, explain=submitted.explain, caller=caller)
            job.emit("ended", wire.EndedEvent(ending.state, ending.exit_code, ending.error,
                                              ending.ended_at, ending.duration_s,
                                              ending.timed_out))
        else:
            on_started(await unless_stopped(
                fleet.submit(request, on_wait=on_wait, on_recorded=recorded,
                             explain=submitted.explain, caller=caller),
                job.stop))
    except FleetError as exc:
        job.emit("error", wire_errors.error_to_wire(exc)[1])
    except asyncio.CancelledError:
        state = "runs on" if job.started else "was cancelled before it started"
        job.emit("error", wire_errors.error_to_wire(ServerUnavailable(
            f"fleet serve stopped; task {job.task_id} {state}"))[1])
        raise
    except Exception:  # a bug: logged with its traceback, the client told without one
        log.exception("dispatch of task %s failed", job.task_id)
        job.emit("error", wire_errors.request_error(500, wire_errors.INTERNAL,
                                                    "internal error (see the server's log)"))
    finally:
        remove_tree(staged)
        job.finish()
