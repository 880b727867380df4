"""The usage page: GPU-hours held and busy by user, group, host or GPU model over a window."""

from __future__ import annotations

import time

from aiohttp import web

from fleet.render.usage import FIELDS, usage_fields
from fleet.services.usage import USAGE_BY
from fleet.web.html import render
from fleet.web.site import WEB

# The windows the page offers (?window=), in seconds.
USAGE_WINDOWS_S = {"1d": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
DEFAULT_USAGE_WINDOW = "7d"


def add_usage_page(app: web.Application) -> None:
    """GET /usage?window=&by=."""
    app.router.add_get("/usage", usage_page)


async def usage_page(request: web.Request) -> web.Response:
    """`fleet usage` as a table: the same service call, the same fields."""
    window = request.query.get("window", DEFAULT_USAGE_WINDOW)
    by = request.query.get("by", "user")
    if window not in USAGE_WINDOWS_S:
        raise web.HTTPBadRequest(text=f"unknown window {window[:40]!r}: one of "
                                 f"{', '.join(USAGE_WINDOWS_S)}")
    if by not in USAGE_BY:
        raise web.HTTPBadRequest(text=f"unknown grouping {by[:40]!r}: one of "
                                 f"{', '.join(USAGE_BY)}")
    until = time.time()
    report = await request.app[WEB].fleet.usage(since=until - USAGE_WINDOWS_S[window],
                                                until=until, by=by)
    return render(request, "usage.html", page="usage", window=window, windows=USAGE_WINDOWS_S,
                  by=by, groupings=USAGE_BY, headers=[(name, header) for name, header, _ in FIELDS],
                  rows=[usage_fields(row) for row in report.rows])
