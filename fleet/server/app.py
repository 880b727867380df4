"""The aiohttp application: status and metrics routes, the /v1 API when served, error replies."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from fleet.errors import FleetError
from fleet.health.metrics import CONTENT_TYPE, MetricFamily, render_metrics, snapshot_metrics
from fleet.snapshot import FleetSnapshot
from fleet.wire import errors as wire_errors
from fleet.wire.codec import JSON, WireError, encode
from fleet.wire.snapshot import snapshot_to_wire

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
SnapshotSource = Callable[[], FleetSnapshot | None]
ExtraMetrics = Callable[[], Sequence[MetricFamily]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class StatusSource:
    """Where /status and /metrics read from: the latest snapshot, and any extra families."""

    snapshot: SnapshotSource
    extra_metrics: ExtraMetrics | None = None


STATUS = web.AppKey("status", StatusSource)
HAS_API = web.AppKey("has_api", bool)


def json_reply(value: object, status: int = 200) -> web.Response:
    """A struct as an application/json response."""
    return web.Response(body=encode(value), status=status, content_type=JSON)


def error_reply(status: int, code: str, message: str) -> web.Response:
    """The error struct for a request refused before (or outside) any service."""
    return json_reply(wire_errors.request_error(status, code, message), status)


_HTTP_CODES = {400: wire_errors.BAD_REQUEST, 404: wire_errors.NOT_FOUND,
               405: wire_errors.METHOD_NOT_ALLOWED, 413: wire_errors.TOO_LARGE}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into the error struct; never a traceback to the client.

    Every refusal is the error struct (`{"error": {"code", "message", "exit_code"}}`): unknown
    routes 404, wrong methods 405, bodies over MAX_BODY_BYTES 413, malformed JSON or structs 400, a
    FleetError its own status; an unexpected exception is logged here and answered 500 without a
    traceback.
    """
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, wire_errors.BAD_REQUEST)
        message = {404: f"no such endpoint: {request.method} {request.path}",
                   413: f"request body over {MAX_BODY_BYTES} bytes"}.get(exc.status, exc.reason)
        reply = error_reply(exc.status, code, message)
        if exc.status == 405 and "Allow" in exc.headers:
            reply.headers["Allow"] = exc.headers["Allow"]
        return reply
    except WireError as exc:
        return error_reply(400, wire_errors.BAD_REQUEST, f"malformed request: {exc}")
    except FleetError as exc:
        status, body = wire_errors.error_to_wire(exc)
        return json_reply(body, status)
    except Exception:  # the one place a bug becomes a 500; logged with its traceback
        log.exception("internal error answering %s %s", request.method, request.path)
        return error_reply(500, wire_errors.INTERNAL, "internal error (see the server's log)")


async def index(request: web.Request) -> web.Response:
    """What this server serves."""
    api = " /v1/..." if request.app.get(HAS_API, False) else ""
    return web.Response(text=f"fleet: /status /metrics{api}\n")


async def status(request: web.Request) -> web.Response:
    """The latest snapshot (503 with the error struct before the monitor has one)."""
    current = request.app[STATUS].snapshot()
    if current is None:
        return error_reply(503, "not_ready", "no snapshot yet: the monitor is starting")
    return json_reply(snapshot_to_wire(current))


async def metrics(request: web.Request) -> web.Response:
    """Prometheus exposition of the latest snapshot, by prometheus_client."""
    source = request.app[STATUS]
    families = snapshot_metrics(source.snapshot())
    if source.extra_metrics is not None:
        families.extend(source.extra_metrics())
    response = web.Response(body=render_metrics(families))
    response.headers["Content-Type"] = CONTENT_TYPE
    response.headers["Cache-Control"] = "no-store"
    return response


def create_app(source: StatusSource,
               add_api: Callable[[web.Application], None] | None = None) -> web.Application:
    """The application: /, /status and /metrics; with `add_api`, also the /v1 routes it adds."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[error_middleware])
    app[STATUS] = source
    app[HAS_API] = add_api is not None
    app.router.add_get("/", index)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    if add_api is not None:
        add_api(app)
    return app
