"""The /v1 routes: each decodes its struct, names the caller, calls the service the CLI calls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

from fleet import __version__
from fleet.errors import ConfigError, ServerUnavailable
from fleet.probe.limits import MAX_INT
from fleet.server.app import error_reply, json_reply
from fleet.server.identity import Identities
from fleet.server.jobs import Jobs
from fleet.server.keys import BROADCASTER, FLEET, IDENTITIES, JOBS, LEADERSHIP
from fleet.server.stream import Broadcaster
from fleet.server.watch import watch
from fleet.snapshot import FleetSnapshot
from fleet.wire import allocations, drain, events, history, hosts, tasks, usage
from fleet.wire.bounds import check_target
from fleet.wire.codec import API_PREFIX, WireError, decode
from fleet.wire.identity import WhoAmI
from fleet.wire.snapshot import snapshot_to_wire

if TYPE_CHECKING:
    from fleet.server.leader import Leadership
    from fleet.service import Fleet

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Just after the server starts, /v1/status waits this long for the first reading of each host.
FIRST_READING_WAIT_S = 10.0


def add_v1_routes(app: web.Application, fleet: Fleet, identities: Identities,
                  broadcaster: Broadcaster, jobs: Jobs,
                  leadership: Leadership | None = None) -> None:
    """Register the /v1 API of `fleet` on `app` (`leadership`: this server's part in a pair).

    A standby answers 503 (ServerUnavailable) for what only the leader has (live status, the
    snapshot stream, reconciling tasks against hosts); reads of the database and dispatch work
    on both.

        GET  /v1/status /v1/hosts /v1/managed /v1/tasks /v1/tasks/{id} /v1/events /v1/allocations
        GET  /v1/usage                       `?since=&until=&by=user|group|host|gpu-model`
        GET  /v1/whoami
        GET  /v1/watch                       server-sent events, one `snapshot` event per change
        POST /v1/tasks                       dispatch; its events as server-sent events
        GET  /v1/tasks/{id}/log              a task's output (?follow=true: until it ends)
        GET  /v1/history/gpu                 GPU samples or buckets (`?since=&until=&host=…`)
        GET  /v1/history/host                host samples or buckets (`?since=&until=&host=…`)
        POST /v1/tasks/{id}/cancel /v1/tasks/reconcile /v1/allocations/release /v1/reservations
        POST /v1/reservations/gpus /v1/drain /v1/undrain /v1/place
    """
    from fleet.server.dispatch_routes import add_dispatch_routes

    app[FLEET] = fleet
    app[IDENTITIES] = identities
    app[BROADCASTER] = broadcaster
    app[JOBS] = jobs
    app[LEADERSHIP] = leadership
    add_dispatch_routes(app)
    v1 = API_PREFIX
    app.router.add_get(f"{v1}/status", leader_only(live_status))
    app.router.add_get(f"{v1}/whoami", whoami)
    app.router.add_get(f"{v1}/hosts", list_hosts)
    app.router.add_get(f"{v1}/managed", list_managed)
    app.router.add_get(f"{v1}/tasks", list_tasks)
    app.router.add_get(f"{v1}/tasks/{{task_id:\\d+}}", get_task)
    app.router.add_post(f"{v1}/tasks/{{task_id:\\d+}}/cancel", cancel_task)
    app.router.add_post(f"{v1}/tasks/reconcile", leader_only(reconcile_tasks))
    app.router.add_get(f"{v1}/events", list_events)
    app.router.add_get(f"{v1}/usage", usage_report)
    app.router.add_get(f"{v1}/allocations", list_allocations)
    app.router.add_get(f"{v1}/unmanaged", list_unmanaged)
    app.router.add_post(f"{v1}/allocations/release", release)
    app.router.add_post(f"{v1}/reservations", reserve)
    app.router.add_post(f"{v1}/reservations/gpus", reserve_gpus)
    app.router.add_get(f"{v1}/history/gpu", gpu_history)
    app.router.add_get(f"{v1}/history/host", host_history)
    app.router.add_post(f"{v1}/drain", drain_target)
    app.router.add_post(f"{v1}/undrain", undrain_target)
    app.router.add_get(f"{v1}/watch", leader_only(watch))


async def body(request: web.Request, kind: type[T]) -> T:
    """The request body as a `kind` struct (an empty body is `{}`: every default)."""
    data = await request.read()
    return decode(data or b"{}", kind)


def query(request: web.Request, kind: type[T]) -> T:
    """The query string as a `kind` struct; tuple fields take repeated keys (`?states=a&states=b`).
    """
    multi = {f.name for f in msgspec.structs.fields(kind)  # type: ignore[arg-type]
             if getattr(f.type, "__origin__", None) is tuple}
    values: dict[str, Any] = {}
    for key in request.query:
        values[key] = request.query.getall(key) if key in multi else request.query[key]
    try:
        return msgspec.convert(values, kind, strict=False)
    except msgspec.ValidationError as exc:
        raise WireError(f"query: {exc}") from exc


def path_id(request: web.Request, name: str = "task_id") -> int:
    """The id in the path (digits, by the route); WireError when no SQLite INTEGER holds it."""
    text = request.match_info[name]
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(MAX_INT)) or int(digits) > MAX_INT:
        raise WireError(f"{name} {text[:40]}{'...' if len(text) > 40 else ''}: "
                        f"out of range (at most {MAX_INT})")
    return int(digits)


async def _settled_snapshot(fleet: Fleet) -> FleetSnapshot | None:
    """The latest snapshot; just after start, wait (bounded) until every host was read once."""
    deadline = asyncio.get_running_loop().time() + FIRST_READING_WAIT_S
    while True:
        current = fleet.snapshot()
        settled = current is not None and all(h.state != "unknown" for h in current.hosts)
        if settled or asyncio.get_running_loop().time() >= deadline:
            return current
        await asyncio.sleep(0.1)


def leader_only(handler: Handler) -> Handler:
    """`handler` on the leader; on a standby, ServerUnavailable (503, exit 9) naming the leader.
    """
    async def guarded(request: web.Request) -> web.StreamResponse:
        leadership = request.app[LEADERSHIP]
        if leadership is not None and not leadership.leading:
            raise ServerUnavailable(
                f"this fleet serve is the standby (leader: {await leadership.leader()}): live "
                "status and the snapshot stream come from the leader; tasks, events, "
                "allocations, history and dispatch work here")
        return await handler(request)
    guarded.__doc__ = handler.__doc__
    return guarded


async def live_status(request: web.Request) -> web.Response:
    """The monitor's latest snapshot, narrowed to `?hosts=PATTERN` (503 if none comes in time)."""
    fleet = request.app[FLEET]
    current = await _settled_snapshot(fleet)
    if current is None:
        return error_reply(503, "not_ready", "no snapshot yet: the monitor is starting")
    pattern = request.query.get("hosts")
    if pattern:
        names = {spec.name for spec in fleet.hosts(pattern)}
        unwatched = sorted(names - {host.spec.name for host in current.hosts})
        if unwatched:  # managed, but outside this server's --hosts: not left out unsaid
            shown = ", ".join(unwatched[:5]) + (", …" if len(unwatched) > 5 else "")
            raise ConfigError(f"--hosts {pattern}: {shown} {'is' if len(unwatched) == 1 else 'are'}"
                              " managed but not watched by this fleet serve (its --hosts "
                              "leaves them out): ask in local mode (FLEET_SERVER=local) or "
                              "widen the server's --hosts")
        current = FleetSnapshot(current.taken_at,
                                tuple(h for h in current.hosts if h.spec.name in names),
                                current.changed & names)
    return json_reply(snapshot_to_wire(current))


async def whoami(request: web.Request) -> web.Response:
    """Who the server sees at the other end of this socket."""
    caller = request.app[IDENTITIES].caller(request)
    leadership = request.app[LEADERSHIP]
    role = leadership.role if leadership is not None else "leader"
    return json_reply(WhoAmI(caller.user, caller.uid, tuple(sorted(caller.groups)),
                             caller.is_admin, os.getpid(), __version__, role))


async def list_hosts(request: web.Request) -> web.Response:
    """Every host the database knows (`Fleet.registered_hosts`)."""
    return json_reply(hosts.hosts_to_wire(await request.app[FLEET].registered_hosts()))


async def list_managed(request: web.Request) -> web.Response:
    """The managed hosts matching `?hosts=PATTERN` (`Fleet.managed_hosts`)."""
    specs = await request.app[FLEET].managed_hosts(request.query.get("hosts"))
    return json_reply(hosts.managed_to_wire(specs))


async def list_tasks(request: web.Request) -> web.Response:
    """Tasks, oldest first (`Fleet.tasks`)."""
    wanted = query(request, tasks.TaskQuery)
    unknown = sorted(set(wanted.states) - set(tasks.TASK_STATES))
    if unknown:
        raise WireError(f"unknown task state {', '.join(unknown)}")
    if wanted.group is not None:
        return json_reply(tasks.tasks_to_wire(await request.app[FLEET].members(wanted.group)))
    rows = await request.app[FLEET].tasks(states=wanted.states or None, limit=wanted.limit,
                                          since=wanted.since)
    return json_reply(tasks.tasks_to_wire(rows))


async def get_task(request: web.Request) -> web.Response:
    """One task (`Fleet.task`; unknown ids are bad input, exit 2)."""
    row = await request.app[FLEET].task(path_id(request))
    return json_reply(tasks.task_to_wire(row))


async def cancel_task(request: web.Request) -> web.Response:
    """Cancel a task: the caller's own, or anyone's for an admin."""
    task_id = path_id(request)
    wanted = await body(request, tasks.CancelRequest)
    caller = request.app[IDENTITIES].caller(request)
    row = await request.app[FLEET].cancel(task_id, grace_s=wanted.grace_s, caller=caller)
    return json_reply(tasks.task_to_wire(row))


async def reconcile_tasks(request: web.Request) -> web.Response:
    """Check running tasks against their hosts now (the server also does it every 30 s)."""
    report = await request.app[FLEET].reconcile_tasks()
    return json_reply(tasks.ReconcileResult(tuple(sorted(report.ended.items())),
                                            report.still_running,
                                            report.unreachable))


async def list_events(request: web.Request) -> web.Response:
    """Events matching the query (`Fleet.events`)."""
    wanted = query(request, events.EventQuery)
    rows = await request.app[FLEET].events(
        since=wanted.since, until=wanted.until, severity=wanted.severity, host=wanted.host,
        kind=wanted.kind, limit=wanted.limit, newest_first=wanted.newest_first)
    return json_reply(events.events_to_wire(rows))


async def usage_report(request: web.Request) -> web.Response:
    """GPU-hours held and busy, tasks and waits per user/group/host/model (`Fleet.usage`)."""
    wanted = query(request, usage.UsageQuery)
    report = await request.app[FLEET].usage(since=wanted.since, until=wanted.until,
                                            by=wanted.by)
    return json_reply(usage.usage_to_wire(report))


async def list_unmanaged(request: web.Request) -> web.Response:
    """GPUs running processes fleet did not start (`Fleet.unmanaged_use`)."""
    return json_reply(allocations.unmanaged_to_wire(await request.app[FLEET].unmanaged_use()))


async def list_allocations(request: web.Request) -> web.Response:
    """Who holds which GPU (`Fleet.allocations`)."""
    wanted = query(request, allocations.AllocationQuery)
    rows = await request.app[FLEET].allocations(active_only=wanted.active_only)
    return json_reply(allocations.allocations_to_wire(rows))


async def release(request: web.Request) -> web.Response:
    """Release allocations by id and/or every reservation of the caller."""
    wanted = await body(request, allocations.ReleaseRequest)
    if not wanted.ids and not wanted.all_mine:
        raise WireError("give allocation ids to release, or all_mine")
    fleet, caller = request.app[FLEET], request.app[IDENTITIES].caller(request)
    released = await fleet.release_mine(caller=caller) if wanted.all_mine else []
    if wanted.ids:
        released += await fleet.release(list(wanted.ids), force=wanted.force, caller=caller)
    return json_reply(allocations.ReleaseResult(tuple(released)))


async def reserve(request: web.Request) -> web.Response:
    """Hold GPUs for the caller (the owner is the caller's Unix user, whatever the body says)."""
    from fleet.placement.request import PlacementRequest

    wanted = await body(request, allocations.ReserveRequest)
    placement = PlacementRequest.from_dict(wanted.placement)
    fleet, caller = request.app[FLEET], request.app[IDENTITIES].caller(request)
    claimed = await fleet.reserve(placement, duration_s=wanted.duration_s, note=wanted.note,
                                  caller=caller)
    return json_reply(allocations.claim_to_wire(claimed))


async def reserve_gpus(request: web.Request) -> web.Response:
    """Hold exactly these GPUs of one host for the caller (all or none)."""
    wanted = await body(request, allocations.ReserveGpusRequest)
    fleet, caller = request.app[FLEET], request.app[IDENTITIES].caller(request)
    claimed = await fleet.reserve_gpus(wanted.host, list(wanted.gpu_indices),
                                       duration_s=wanted.duration_s, note=wanted.note,
                                       caller=caller)
    return json_reply(allocations.claim_to_wire(claimed))


def _history_limit(limit: int | None) -> int:
    """The most points a history reply holds (history.reply_limit); a limit over the server's
    maximum is bad input (400, exit 2), so that no one client makes it hold every sample."""
    from fleet.errors import ConfigError

    try:
        return history.reply_limit(limit)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


async def gpu_history(request: web.Request) -> web.Response:
    """GPU samples or buckets between two times (`Fleet.gpu_history`), at most
    history.MAX_HISTORY_POINTS of them; `truncated` when the range holds more."""
    wanted = query(request, history.GpuHistoryQuery)
    if wanted.gpu is not None:
        check_target(wanted.gpu, "gpu")
    limit = _history_limit(wanted.limit)
    points = await request.app[FLEET].gpu_history(
        since=wanted.since, until=wanted.until, host=wanted.host, gpu=wanted.gpu,
        bucket_s=wanted.bucket_s, limit=limit + 1)
    return json_reply(history.history_to_wire(points[:limit], len(points) > limit))


async def host_history(request: web.Request) -> web.Response:
    """Host samples or buckets between two times (`Fleet.host_history`), bounded as
    gpu_history."""
    wanted = query(request, history.HostHistoryQuery)
    limit = _history_limit(wanted.limit)
    points = await request.app[FLEET].host_history(
        since=wanted.since, until=wanted.until, host=wanted.host, bucket_s=wanted.bucket_s,
        limit=limit + 1)
    return json_reply(history.host_history_to_wire(points[:limit], len(points) > limit))


async def drain_target(request: web.Request) -> web.Response:
    """Drain a host or GPU (admins only)."""
    wanted = await body(request, drain.DrainRequest)
    check_target(wanted.target, "target")
    caller = request.app[IDENTITIES].caller(request)
    outcome = await request.app[FLEET].drain(wanted.target, wanted.reason, caller=caller)
    return json_reply(drain.drain_to_wire(outcome))


async def undrain_target(request: web.Request) -> web.Response:
    """Undrain a host or GPU (admins only)."""
    wanted = await body(request, drain.UndrainRequest)
    check_target(wanted.target, "target")
    caller = request.app[IDENTITIES].caller(request)
    outcome = await request.app[FLEET].undrain(wanted.target, caller=caller)
    return json_reply(drain.drain_to_wire(outcome))

