"""The record pages: tasks (sacct-like) with a live log, allocations, events by severity/kind."""

from __future__ import annotations

import logging
import re
from typing import get_args

from aiohttp import web

from fleet.errors import FleetError
from fleet.records import Severity
from fleet.server.relay import EventStream
from fleet.web.html import render, when
from fleet.web.site import WEB
from fleet.wire.codec import encode
from fleet.wire.tasks import TASK_STATES

log = logging.getLogger(__name__)

SEVERITIES: tuple[str, ...] = get_args(Severity)
TASKS_SHOWN = 200
EVENTS_SHOWN = 200
LOG_QUEUE_FRAMES = 256
FOLLOWER_STOP_S = 30.0
# Control characters but newline and tab; the log is text, never terminal commands.
_LOG_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def add_record_pages(app: web.Application) -> None:
    """GET /tasks, /tasks/{id}, /tasks/{id}/log (server-sent events), /allocations, /events."""
    app.router.add_get("/tasks", tasks_page)
    app.router.add_get(r"/tasks/{task_id:\d+}", task_page)
    app.router.add_get(r"/tasks/{task_id:\d+}/log", task_log)
    app.router.add_get("/allocations", allocations_page)
    app.router.add_get("/events", events_page)


def log_text(data: bytes) -> str:
    """Task output as text: invalid UTF-8 replaced, control characters shown as "?"."""
    return _LOG_CONTROL.sub("?", data.decode("utf-8", errors="replace").replace("\r\n", "\n"))


async def tasks_page(request: web.Request) -> web.Response:
    """The newest tasks, optionally in one `?state=`."""
    state = request.query.get("state", "")
    if state and state not in TASK_STATES:
        raise web.HTTPBadRequest(text=f"unknown task state {state[:40]!r}: one of "
                                 f"{', '.join(TASK_STATES)}")
    rows = await request.app[WEB].fleet.tasks(states=[state] if state else None,
                                              limit=TASKS_SHOWN)
    return render(request, "tasks.html", page="tasks", tasks=rows[::-1], state=state,
                  states=TASK_STATES, limit=TASKS_SHOWN)


async def task_page(request: web.Request) -> web.Response:
    """One task's record, and its log as it is written."""
    row = await request.app[WEB].fleet.task(int(request.match_info["task_id"]))
    return render(request, "task.html", page="tasks", task=row)


async def task_log(request: web.Request) -> web.StreamResponse:
    """A task's output as `output` events (text), then `end` with its final state.

    On the socket, only to the task's owner or an admin, as `GET /v1/tasks/{id}/log`.
    """
    context = request.app[WEB]
    fleet = context.fleet
    caller = context.identities.caller(request) if context.identities is not None else None
    task_id = int(request.match_info["task_id"])
    await fleet.task(task_id)  # an unknown id is a 4xx page before the stream starts
    stream = EventStream(LOG_QUEUE_FRAMES)  # a page that falls behind is let go (it reloads)

    def emit(event: str, value: object) -> None:
        stream.emit(event, encode(value))

    async def follow() -> None:
        try:
            row = await fleet.follow(task_id, on_output=lambda data: emit("output",
                                     log_text(data)), stop=stream.stop, follow=True,
                                     caller=caller)
            emit("end", {"state": row.state, "exit_code": row.exit_code,
                         "ended": when(row.ended_at)})
        except FleetError as exc:
            emit("end", {"state": "unknown", "error": str(exc)})

    return await stream.serve(request, follow(), name=f"fleet-web-log-{task_id}",
                              stop_timeout_s=FOLLOWER_STOP_S)


async def allocations_page(request: web.Request) -> web.Response:
    """Who holds which GPU now (`?all=1`: released ones too)."""
    everything = request.query.get("all", "") == "1"
    rows = await request.app[WEB].fleet.allocations(active_only=not everything)
    return render(request, "allocations.html", page="allocations",
                  allocations=rows, everything=everything)


async def events_page(request: web.Request) -> web.Response:
    """The newest events: `?severity=` (that level and worse), `?kind=` (a glob), `?host=`."""
    severity = request.query.get("severity", "")
    if severity and severity not in SEVERITIES:
        raise web.HTTPBadRequest(text=f"unknown severity {severity[:40]!r}: one of "
                                 f"{', '.join(SEVERITIES)}")
    kind = request.query.get("kind", "").strip()
    host = request.query.get("host", "").strip()
    chosen: Severity | None = severity or None  # type: ignore[assignment]
    rows = await request.app[WEB].fleet.events(severity=chosen, kind=kind or None,
                                               host=host or None, limit=EVENTS_SHOWN,
                                               newest_first=True)
    return render(request, "events.html", page="events", events=rows, severity=severity, kind=kind,
                  host=host, severities=SEVERITIES)
