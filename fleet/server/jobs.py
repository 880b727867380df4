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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from fleet.dispatch.request import KEEP_QUEUED
from fleet.errors import ConfigError, FleetError, ServerUnavailable
from fleet.server.stream import sse_frame
from fleet.wire import dispatch as wire
from fleet.wire import errors as wire_errors
from fleet.wire.codec import WireError, decode, encode

if TYPE_CHECKING:
    from fleet.caller import Caller
    from fleet.dispatch.request import DispatchRequest, StartedTask
    from fleet.service import Fleet

log = logging.getLogger(__name__)

# Frames that may wait for one client; a client further behind is dropped (the job goes on).
JOB_QUEUE_FRAMES = 256
QUEUED_FILE = "queued.json"
ARRAY_FILE = "array.json"


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

    def end_stream(self) -> None:
        """The client has all it asked for; what the job does next is the server's own."""
        self.finish()
        self.client_gone = True

    def leave(self) -> None:
        """The client is gone: before the task started, that cancels it."""
        self.client_gone = True
        if not self.started:
            self.stop.set()


class QueuedSubmission(msgspec.Struct, frozen=True):
    """What a queued task needs to be resumed by the next server: kept next to its files."""

    task_id: int
    owner: str
    request: wire.SubmitRequest  # its files already staged (fleet.dispatch.staging.without_data)


class ArraySubmission(msgspec.Struct, frozen=True):
    """What an unfinished array needs to be driven on by the next server: kept next to its
    files until the array ends."""

    array_id: int
    owner: str
    request: wire.SubmitRequest  # its files already staged, its `array` the members' arguments


class Jobs:
    """The running jobs and the private directory their files are staged in.

    `root` holds one directory per submission: `files/` (the staged files) and, while the task
    waits in the queue, `queued.json` (an array: `array.json` until it ends), so that a
    restarted server resumes it (`resume`).
    """

    def __init__(self, root: Path) -> None:
        self.running: dict[asyncio.Task[None], Path] = {}
        self.root = root

    def staging_dir(self) -> Path:
        """A new directory (0700) for one submission, with an empty `files/` inside."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(dir=self.root))
        (directory / "files").mkdir(mode=0o700)
        return directory

    def remember(self, directory: Path, submitted: wire.SubmitRequest, task_id: int,
                 owner: str) -> None:
        """Keep a queued task's request on disk beside its files."""
        from fleet.dispatch.staging import without_data

        record = QueuedSubmission(task_id, owner, without_data(submitted))
        (directory / QUEUED_FILE).write_bytes(encode(record))

    def remember_array(self, directory: Path, submitted: wire.SubmitRequest, array_id: int,
                       owner: str) -> None:
        """Keep an array's submission on disk beside its files while it runs."""
        from fleet.dispatch.staging import without_data

        record = ArraySubmission(array_id, owner, without_data(submitted))
        (directory / ARRAY_FILE).write_bytes(encode(record))

    def start(self, work: Coroutine[Any, Any, None], name: str, directory: Path) -> None:
        """Run `work` on its own, kept until it ends; `directory` holds its files."""
        job = asyncio.create_task(work, name=name)
        self.running[job] = directory
        job.add_done_callback(self._ended)

    def _ended(self, job: asyncio.Task[None]) -> None:
        self.running.pop(job, None)

    async def resume(self, fleet: Fleet) -> list[int]:
        """Resume the queued tasks and the arrays a stopped server left (the ids); drop other
        leftovers."""
        from fleet.dispatch.staging import staged_request
        from fleet.server.array_job import resume_array_job

        resumed: list[int] = []
        if not self.root.is_dir():
            return resumed
        live = set(self.running.values())  # a standby that took over: its own queued jobs
        for directory in sorted(self.root.iterdir()):
            if directory in live:
                continue
            if (directory / ARRAY_FILE).exists():
                try:
                    array = decode((directory / ARRAY_FILE).read_bytes(), ArraySubmission)
                except (OSError, WireError) as exc:
                    log.info("not resuming %s: %s", directory.name, exc)
                    remove_tree(directory)
                    continue
                self.start(resume_array_job(fleet, array, directory),
                           f"fleet-serve-resume-array-{array.array_id}", directory)
                resumed.append(array.array_id)
                continue
            try:
                record = decode((directory / QUEUED_FILE).read_bytes(), QueuedSubmission)
                row = await fleet.task(record.task_id)
                if row.state != "queued":
                    raise ConfigError(f"task {record.task_id} is {row.state}")
                request = staged_request(record.request, directory / "files")
            except (OSError, WireError, ConfigError) as exc:
                log.info("not resuming %s: %s", directory.name, exc)
                remove_tree(directory)
                continue
            request = replace(request, owner=record.owner)
            self.start(resume_queued(fleet, request, record.task_id, directory),
                       f"fleet-serve-resume-{record.task_id}", directory)
            resumed.append(record.task_id)
        return resumed

    async def close(self) -> None:
        """Stop (server stopping): started tasks run on and reconcile records them; queued ones
        stay queued, their files kept for the next server."""
        for job in list(self.running):
            job.cancel(KEEP_QUEUED)
        if self.running:
            await asyncio.wait(list(self.running), timeout=10.0)


def remove_tree(path: Path) -> None:
    """Remove staged files, saying so in the log if that fails."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("could not remove staged files %s: %s", path, exc)


def started_event(started: StartedTask) -> wire.StartedEvent:
    """What the client is told when its task (or gang: every node) runs."""
    return wire.StartedEvent(
        task_id=started.task_id, host=started.host.name, task_dir=started.task_dir,
        pgid=started.pgid, gpu_uuids=started.gpu_uuids, gpu_indices=started.gpu_indices,
        started_at=started.started_at, timeout_s=started.timeout_s,
        explanation=started.explanation,
        nodes=tuple(started_event(node) for node in started.nodes))


async def run_dispatch(fleet: Fleet, job: DispatchJob, request: DispatchRequest,
                       submitted: wire.SubmitRequest, caller: Caller, jobs: Jobs,
                       staged: Path) -> None:
    """Submit the task for `caller`, stream its events to `job`, and (when following) record
    its end whether or not the client is still there."""
    from fleet.dispatch.lifecycle import unless_stopped

    def recorded(task_id: int) -> None:
        job.task_id = task_id
        if submitted.wait:
            jobs.remember(staged, submitted, task_id, caller.user)
        job.emit("submitted", wire.SubmittedEvent(task_id))

    def on_started(started: StartedTask) -> None:
        job.started = True
        remove_tree(staged)  # uploaded: the host has its copy
        job.emit("started", started_event(started))

    def on_wait(message: str) -> None:
        job.emit("waiting", wire.WaitingEvent(message))
        if submitted.until_queued and not submitted.follow:
            job.end_stream()  # --wait --detach: the client has its place in the queue

    kept = False
    try:
        if submitted.follow:
            _started, ending = await fleet.dispatch(
                request, on_output=lambda data: job.emit("output", wire.OutputEvent(data)),
                on_wait=on_wait, on_started=on_started, on_recorded=recorded, stop=job.stop,
                lost_after_s=submitted.lost_after_s, explain=submitted.explain, caller=caller)
            job.emit("ended", wire.EndedEvent(ending.state, ending.exit_code, ending.error,
                                              ending.ended_at, ending.duration_s,
                                              ending.timed_out))
        else:  # --detach: the client's stream ends once the task runs; the server follows
            started = await unless_stopped(
                fleet.submit(request, on_wait=on_wait, on_recorded=recorded,
                             explain=submitted.explain, caller=caller),
                job.stop)
            on_started(started)
            job.end_stream()
            await _follow_unattended(fleet, started.task_id, submitted.lost_after_s)
    except FleetError as exc:
        job.emit("error", wire_errors.error_to_wire(exc)[1])
    except asyncio.CancelledError as exc:
        kept = await _kept_queued(fleet, job.task_id, exc)
        state = ("runs on" if job.started else "stays queued: the next fleet serve resumes it"
                 if kept else "was cancelled before it started")
        job.emit("error", wire_errors.error_to_wire(ServerUnavailable(
            f"fleet serve stopped; task {job.task_id} {state}"))[1])
        raise
    except Exception:  # a bug: logged with its traceback, the client told without one
        log.exception("dispatch of task %s failed", job.task_id)
        job.emit("error", wire_errors.request_error(500, wire_errors.INTERNAL,
                                                    "internal error (see the server's log)"))
    finally:
        if not kept:
            remove_tree(staged)
        job.finish()


async def _follow_unattended(fleet: Fleet, task_id: int, lost_after_s: float | None) -> None:
    """Follow a detached task to its end so that its end is recorded when it happens (nobody
    reads the output here); a failure is logged, and the reconciler takes over."""
    try:
        row = await fleet.follow(task_id, on_output=lambda _data: None, follow=True,
                                 lost_after_s=lost_after_s)
        log.info("detached task %d ended %s", task_id, row.state)
    except FleetError as exc:
        log.warning("detached task %d: %s (the reconciler will record its end)", task_id, exc)


async def _kept_queued(fleet: Fleet, task_id: int | None, exc: asyncio.CancelledError) -> bool:
    """Whether a cancelled job left its task queued for the next server."""
    if task_id is None or exc.args != (KEEP_QUEUED,):
        return False
    with contextlib.suppress(FleetError):
        return (await asyncio.shield(fleet.task(task_id))).state == "queued"
    return False


async def resume_queued(fleet: Fleet, request: DispatchRequest, task_id: int,
                        staged: Path) -> None:
    """Claim, start and follow a task a stopped server left queued (nobody streams it)."""
    kept = False
    try:
        ending = await fleet.resume_queued(request, task_id,
                                           on_started=lambda _started: remove_tree(staged))
        log.info("resumed task %d ended %s", task_id, ending.state)
    except FleetError as exc:
        log.warning("resumed task %d: %s", task_id, exc)
    except asyncio.CancelledError as exc:
        kept = await _kept_queued(fleet, task_id, exc)
        raise
    finally:
        if not kept:
            remove_tree(staged)
