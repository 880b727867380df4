"""`POST /v1/tasks`, `GET /v1/tasks/{id}/log`, `POST /v1/place`: dispatch through the server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from fleet.server.app import error_reply, json_reply
from fleet.server.keys import FLEET, IDENTITIES, JOBS
from fleet.server.relay import EVENT_STREAM_HEADERS, EventStream, relay
from fleet.wire import dispatch as wire
from fleet.wire import errors as wire_errors
from fleet.wire import tasks
from fleet.wire.codec import API_PREFIX, decode, encode

if TYPE_CHECKING:
    from fleet.dispatch.request import DispatchRequest

# A submission's body may carry MAX_UPLOAD_BYTES of files as base64, plus the rest.
MAX_SUBMIT_BODY = wire.MAX_UPLOAD_BYTES * 4 // 3 + (1 << 20)
# Log output frames that may wait for a slow client before it is dropped.
LOG_QUEUE_FRAMES = 256


def add_dispatch_routes(app: web.Application) -> None:
    """Register the dispatch endpoints (the Fleet and identities are already on `app`)."""
    v1 = API_PREFIX
    app.router.add_post(f"{v1}/tasks", submit_task)
    app.router.add_get(f"{v1}/tasks/{{task_id:\\d+}}/log", task_log)
    app.router.add_post(f"{v1}/place", place)


async def _read_bounded(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is over `limit` bytes (read no further than that)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def submit_task(request: web.Request) -> web.StreamResponse:
    """Dispatch a task for the caller; its events stream back as server-sent events:

    `submitted` (the id), `waiting` (queue lines), `started`, `output`…, then `ended`, or `error`
    (the error struct). With `follow: false` (--detach) the stream ends at `started`. Bad input
    is refused with a 4xx before the stream starts and before any task row is written.
    """
    from fleet.dispatch.staging import stage
    from fleet.server.jobs import DispatchJob, remove_tree, run_dispatch

    data = await _read_bounded(request, MAX_SUBMIT_BODY)
    if data is None:
        return error_reply(413, wire_errors.TOO_LARGE,
                           f"submission over {MAX_SUBMIT_BODY >> 20} MiB (files are limited "
                           f"to {wire.MAX_UPLOAD_BYTES >> 20} MiB)")
    submitted = decode(data, wire.SubmitRequest)
    fleet, caller = request.app[FLEET], request.app[IDENTITIES].caller(request)
    jobs = request.app[JOBS]
    staged = jobs.staging_dir()
    try:
        dispatch_request: DispatchRequest = await asyncio.to_thread(stage, submitted,
                                                                    staged / "files")
    except BaseException:
        remove_tree(staged)
        raise
    job = DispatchJob()
    if submitted.array is not None:
        from fleet.server.array_job import array_members, run_array_job

        try:
            spec, members = array_members(dispatch_request, submitted.array)
        except BaseException:
            remove_tree(staged)
            raise
        jobs.start(run_array_job(fleet, job, dispatch_request, spec, members, submitted,
                                 caller, jobs, staged),
                   f"fleet-serve-array-{caller.user}", staged)
    else:
        jobs.start(run_dispatch(fleet, job, dispatch_request, submitted, caller, jobs, staged),
                   f"fleet-serve-dispatch-{caller.user}", staged)
    response = web.StreamResponse(headers=EVENT_STREAM_HEADERS)
    ended = False
    try:
        await response.prepare(request)
        ended = await relay(request, response, job.frames)
    finally:
        if not ended:  # the client went away: a task not yet started is cancelled
            job.leave()
    return response


async def task_log(request: web.Request) -> web.StreamResponse:
    """A task's output as `output` events, then its row as a `task` event (or `error`); with
    `?follow=true` until the task ends. The caller's own tasks only, unless an admin."""
    from fleet.server.routes import path_id, query

    wanted = query(request, wire.LogQuery)
    task_id = path_id(request)
    fleet, caller = request.app[FLEET], request.app[IDENTITIES].caller(request)
    await fleet.task(task_id)  # an unknown id is a 400 before the stream starts
    stream = EventStream(LOG_QUEUE_FRAMES)  # a client that falls behind is let go

    def emit(event: str, value: object) -> None:
        stream.emit(event, encode(value))

    async def follow() -> None:
        from fleet.errors import FleetError

        try:
            row = await fleet.follow(task_id, on_output=lambda data: emit(
                "output", wire.OutputEvent(data)), stop=stream.stop, follow=wanted.follow,
                lost_after_s=wanted.lost_after_s, caller=caller)
            emit("task", tasks.task_to_wire(row))
        except FleetError as exc:
            emit("error", wire_errors.error_to_wire(exc)[1])

    return await stream.serve(request, follow(), name=f"fleet-serve-log-{task_id}",
                              stop_timeout_s=30.0)


async def place(request: web.Request) -> web.Response:
    """Where a request would be placed now, explained (nothing is claimed)."""
    from fleet.placement.request import PlacementRequest
    from fleet.render.explain import place_report
    from fleet.server.routes import body

    wanted = await body(request, wire.PlaceRequest)
    caller = request.app[IDENTITIES].caller(request)
    result = await request.app[FLEET].place(PlacementRequest.from_dict(dict(wanted.placement)),
                                            caller=caller)
    return json_reply(place_report(result))
