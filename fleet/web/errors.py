"""Security headers on every web reply, and failures as a plain HTML page with a clear status."""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from fleet.errors import FleetError
from fleet.wire.errors import error_to_wire

log = logging.getLogger(__name__)
__all__ = ["Handler", "Middleware", "error_page", "html_errors", "security_headers"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Scripts and styles only from the page's own files: no inline script, no other origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def error_page(status: int, title: str, message: str) -> web.Response:
    """A small self-contained HTML page (no template, so it works whatever failed)."""
    body = ("<!doctype html><html lang=en><meta charset=utf-8>"
            f"<title>{html.escape(title)} — fleet</title><h1>{status} {html.escape(title)}</h1>"
            f"<p>{html.escape(message)}</p><p><a href=\"/web/\">Overview</a></p></html>")
    return web.Response(text=body, status=status, content_type="text/html")


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Add the CSP and friends to every reply, refusals and streams included."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(SECURITY_HEADERS)
        raise
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
    return response


@web.middleware
async def html_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bad input (an unknown host, a bad window, a FleetError) as a 4xx page, bugs as a 500."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = exc.text if exc.text and exc.text != f"{exc.status}: {exc.reason}" else ""
        return error_page(exc.status, exc.reason, reason or f"{request.path[:200]}")
    except FleetError as exc:
        status, _body = error_to_wire(exc)
        return error_page(status if 400 <= status < 500 else 400, "Bad request", str(exc))
    except Exception:  # the one place a bug becomes a 500 page; logged with its traceback
        log.exception("web: internal error answering %s %s", request.method, request.path)
        return error_page(500, "Internal error", "See the server's log.")
