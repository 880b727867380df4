"""The aiohttp application: status and metrics routes, the /v1 API when served, error replies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from fleet.errors import FleetError
from fleet.health.metrics import CONTENT_TYPE, MetricFamily, render_metrics, snapshot_metrics
from fleet.snapshot import FleetSnapshot
from fleet.wire import errors as wire_errors
from fleet.wire.codec import JSON, WireError, encode
from fleet.wire.snapshot import snapshot_to_wire

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
# A connection must send a whole request head this soon after it opens (or after its previous
# reply), and a request's body may stall no longer than this: a client that sends part of a
# request and waits holds a file descriptor, and enough of them starve every other client.
IDLE_TIMEOUT_S = 30.0
# A request line may hold a query of several 4,096-character texts (the API bounds each).
MAX_REQUEST_LINE_BYTES = 64 * 1024
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
    routes 404, wrong methods 405, bodies over MAX_BODY_BYTES 413, malformed JSON or structs or a
    body its Content-Encoding cannot decode 400, a FleetError its own status; an unexpected
    exception is logged here and answered 500 without a traceback. A client that goes away is
    no error of ours: one line at INFO.
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
    except web.RequestPayloadError as exc:  # e.g. a body that its Content-Encoding cannot decode
        return _unreadable_body(request, exc)
    except FleetError as exc:
        status, body = wire_errors.error_to_wire(exc)
        return json_reply(body, status)
    except Exception as exc:  # the one place a bug becomes a 500; logged with its traceback
        if isinstance(exc, ConnectionError) and client_gone(request):
            log.info("%s %s: the client went away (%s)", request.method, request.path[:200], exc)
            return error_reply(400, wire_errors.BAD_REQUEST, "incomplete request")  # unsent
        log.exception("internal error answering %s %s", request.method, request.path)
        return error_reply(500, wire_errors.INTERNAL, "internal error (see the server's log)")


def _unreadable_body(request: web.Request, exc: web.RequestPayloadError) -> web.Response:
    """400 naming why the body could not be read, and the connection closed after it.

    The body's stream stays broken: it is ended here, or aiohttp, draining the rest after the
    reply, would meet its error again and log it with a traceback.
    """
    cause = exc.__cause__
    detail = cause.message if isinstance(cause, HttpProcessingError) else " ".join(
        str(exc).split())
    reply = error_reply(400, wire_errors.BAD_REQUEST, f"unreadable request body: {detail}")
    request.content.feed_eof()
    reply.force_close()
    return reply


def client_gone(request: web.Request) -> bool:
    """True once the request's connection is closed (the client left, or a deadline hit)."""
    return request.transport is None or request.transport.is_closing()


class _BodyWatch:
    """Closes a request's connection when its body makes no progress for `idle_s` seconds."""

    def __init__(self, request: web.Request, idle_s: float) -> None:
        self.request = request
        self.idle_s = idle_s
        self.seen = request.content.total_raw_bytes
        self.handle = asyncio.get_running_loop().call_later(idle_s, self.check)

    def check(self) -> None:
        content, transport = self.request.content, self.request.transport
        if content.is_eof() or transport is None or transport.is_closing():
            return
        if content.total_raw_bytes == self.seen:
            log.info("%s %s: no request body for %gs, closing the connection",
                     self.request.method, self.request.path[:200], self.idle_s)
            transport.close()  # the handler's read ends with ConnectionResetError
            return
        self.seen = content.total_raw_bytes
        self.handle = asyncio.get_running_loop().call_later(self.idle_s, self.check)


@web.middleware
async def body_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Close the connection of a request whose body stalls for IDLE_TIMEOUT_S seconds."""
    if request.content.is_eof():
        return await handler(request)
    watch = _BodyWatch(request, IDLE_TIMEOUT_S)
    try:
        return await handler(request)
    finally:
        watch.handle.cancel()


def app_runner(app: web.Application, shutdown_timeout_s: float) -> web.AppRunner:
    """The runner every server here uses: no access log, no signals, IDLE_TIMEOUT_S to send a
    request's head (aiohttp's keep-alive timer runs from the connection's start), and a request
    line long enough for any query the API's own bounds would refuse with a JSON 400 (aiohttp's
    8,190 bytes answered a long --hosts pattern in plain text, which a client cannot read)."""
    return web.AppRunner(app, handle_signals=False, access_log=None,
                         shutdown_timeout=shutdown_timeout_s, keepalive_timeout=IDLE_TIMEOUT_S,
                         max_line_size=MAX_REQUEST_LINE_BYTES)


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
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[error_middleware,
                                                                      body_deadline])
    app[STATUS] = source
    app[HAS_API] = add_api is not None
    app.router.add_get("/", index)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    if add_api is not None:
        add_api(app)
    return app
