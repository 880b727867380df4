"""The overview (every host, expandable to GPUs, filtered and sorted) and one host's detail page."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from markupsafe import Markup

from fleet.inventory.select import host_matches
from fleet.web.html import ROOT, TEMPLATES, render, render_streamed
from fleet.web.rows import SORT_KEYS, HostRows, blank_gpu, sort_rows
from fleet.web.site import WEB

# The host page's chart windows (?window=), and the number of points a chart aims at.
WINDOWS_S = {"5m": 300, "1h": 3600, "6h": 6 * 3600, "1d": 86400, "7d": 7 * 86400}
DEFAULT_WINDOW = "1h"
CHART_POINTS = 300
RECENT_EVENTS = 20


def chart_bucket_s(span_s: int) -> int:
    """Seconds per chart point over `span_s`: about CHART_POINTS of them, whole minutes from
    a minute up, so ranges whose raw samples were pruned are drawn from the 1-minute rollups."""
    bucket_s = max(1, span_s // CHART_POINTS)
    return bucket_s if bucket_s < 60 else round(bucket_s / 60) * 60


def add_pages(app: web.Application) -> None:
    """GET / (overview), /hosts/{name} (detail), /live and /live/gpus (their changes)."""
    app.router.add_get("/", overview)
    app.router.add_get("/hosts/{name}", host_detail)
    app.router.add_get("/live", live)
    app.router.add_get("/live/gpus", live_gpus)


async def live(request: web.Request) -> web.StreamResponse:
    """The live rows' server-sent events (fleet.web.live)."""
    return await request.app[WEB].live.watch(request)


async def live_gpus(request: web.Request) -> web.StreamResponse:
    """The GPU rows' server-sent events for the hosts a page shows expanded."""
    return await request.app[WEB].live.watch_gpus(request)


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=message)


async def overview(request: web.Request) -> web.StreamResponse:
    """Every host matching `?hosts=PATTERN` (the `--hosts` syntax), ordered by `?sort=KEY`."""
    pattern = request.query.get("hosts", "").strip()
    sort = request.query.get("sort", "name")
    if sort not in SORT_KEYS:
        raise _bad_request(f"unknown sort {sort[:40]!r}: one of {', '.join(SORT_KEYS)}")
    context = request.app[WEB]
    version, rows = context.live.current()
    shown = [row for row in rows.values()
             if host_matches(pattern or None, row.name, row.groups, row.labels)]
    macros: Any = request.app[TEMPLATES].get_template("_host_row.html").module
    context.host_blocks.keep_only(rows)

    def host_html(row: HostRows) -> Markup:
        return context.host_blocks.html(row, lambda fresh: macros.host_block(fresh, ROOT))

    return await render_streamed(request, "overview.html", page="overview", version=version,
                                 rows=sort_rows(shown, sort), total=len(rows), pattern=pattern,
                                 sort=sort, sort_keys=SORT_KEYS, blank_gpu=blank_gpu(),
                                 host_html=host_html)


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's history over the window, as the chart script reads it (JSON)."""

    label: str
    index: int
    ts: list[float]
    util: list[float | None]
    temp: list[float | None]
    mem_gib: list[float | None]


async def host_detail(request: web.Request) -> web.Response:
    """One host: live GPU rows, history charts over `?window=`, processes, facts, events."""
    context = request.app[WEB]
    name = request.match_info["name"]
    window = request.query.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS_S:
        raise _bad_request(f"unknown window {window[:40]!r}: one of {', '.join(WINDOWS_S)}")
    version, rows = context.live.current()
    row: HostRows | None = rows.get(name)
    snapshot = context.fleet.snapshot()
    host = snapshot.host(name) if snapshot is not None else None
    if row is None or host is None:
        raise web.HTTPNotFound(text=f"no host named {name[:80]!r} is monitored")
    until = time.time()
    span_s = WINDOWS_S[window]
    points = await context.fleet.gpu_history(since=until - span_s, until=until, host=name,
                                             bucket_s=chart_bucket_s(span_s))
    series: dict[int, GpuSeries] = {}
    for point in points:
        gpu = series.setdefault(point.gpu_idx, GpuSeries(f"GPU {point.gpu_idx}", point.gpu_idx,
                                                         [], [], [], []))
        gpu.ts.append(point.ts_ms / 1000)
        gpu.util.append(point.util_avg)
        gpu.temp.append(point.temp_avg)
        gpu.mem_gib.append(None if point.mem_used_avg is None
                           else round(point.mem_used_avg / 1024**3, 2))
    events = await context.fleet.events(host=name, limit=RECENT_EVENTS, newest_first=True)
    charts = [vars(series[index]) for index in sorted(series)]
    return render(request, "host.html", version=version, row=row, host=host, window=window,
                  windows=list(WINDOWS_S), charts={"host": name, "span": span_s,
                                                   "since": until - span_s, "until": until,
                                                   "gpus": charts}, events=events)

