"""The overview's rows and their live diffs, on synthetic snapshots (no hosts, no browser)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import msgspec
from aiohttp import web

from fleet.server.stream import Frame, Subscriber
from fleet.snapshot import AllocationInfo, FleetSnapshot
from fleet.web.live import LiveRows
from fleet.web.rows import STALE_AFTER_S, fleet_rows, sort_rows
from tests.tui.fake_service import NOW, gpu, host

MODEL = "NVIDIA H100 80GB HBM3"


def fleet(util: float = 10.0, *, last_seen: float = NOW - 2) -> FleetSnapshot:
    task = AllocationInfo(allocation_id=1, kind="task", owner="ana", task_id=7)
    atlas = host("atlas", [gpu("atlas", 0, MODEL, 80, util, 0.1, 40, 100),
                           gpu("atlas", 1, MODEL, 80, 90, 60, 88, 600, state="hot",
                               allocation=task),
                           gpu("atlas", 2, MODEL, 80, 50, 20, 50, 300, processes=1)],
                 last_seen=last_seen)
    down = host("bolt", [gpu("bolt", 0, MODEL, 80, 0, 0, 30, 60)], state="unreachable",
                reason="connect timed out", last_seen=NOW - 600)
    return FleetSnapshot(NOW, (atlas, down), frozenset({"atlas", "bolt"}))


def test_cells_count_free_gpus_as_placement_does_and_say_why_not() -> None:
    rows = fleet_rows(fleet(), NOW)
    atlas = rows["atlas"]
    assert atlas.cells["free"] == "1/3"  # GPU 1 is allocated and hot, GPU 2 runs someone's work
    assert atlas.gpus["atlas:0"]["free"] == "free"
    assert atlas.gpus["atlas:1"]["free"] == "GPU state hot"
    assert "not started by fleet" in atlas.gpus["atlas:2"]["free"]
    assert atlas.gpus["atlas:1"]["holder"] == "allocated to task 7 (ana)"
    assert atlas.cells["temp"] == "88 °C" and atlas.cells["hot"] == "hot"
    assert atlas.cells["util"] == "50 %" and atlas.cells["alloc"] == "ana"
    assert atlas.cells["fresh"] == "live" and atlas.cells["tone"] == "ok"


def test_down_and_stale_hosts_are_dimmed_and_say_why_in_words() -> None:
    rows = fleet_rows(fleet(), NOW)
    bolt = rows["bolt"]
    assert bolt.cells["fresh"] == "down" and bolt.cells["tone"] == "dim"
    assert bolt.cells["why"] == "unreachable: connect timed out (values from 10 min ago)"
    assert bolt.gpus["bolt:0"]["tone"] == "dim"
    stale = fleet_rows(fleet(last_seen=NOW - STALE_AFTER_S - 15), NOW)["atlas"]
    assert stale.cells["fresh"] == "stale" and stale.cells["tone"] == "dim"
    assert stale.cells["why"].startswith("stale: last reading 40s+ ago")


def test_sort_orders_busiest_first_and_unknown_values_last() -> None:
    rows = fleet_rows(fleet(), NOW).values()
    assert [r.name for r in sort_rows(rows, "temp")] == ["atlas", "bolt"]
    assert [r.name for r in sort_rows(rows, "state")] == ["bolt", "atlas"]
    assert [r.name for r in sort_rows(rows, "name")] == ["atlas", "bolt"]


def _frames(live: LiveRows) -> list[Frame | None]:
    return _queued(next(iter(live.broadcaster.subscribers)))


def _data(frame: Frame | None) -> tuple[str, dict[str, object]]:
    assert frame is not None
    event, data = frame.decode().splitlines()[:2]
    return event.removeprefix("event: "), json.loads(data.removeprefix("data: "))


async def test_only_changed_cells_are_sent_and_gpus_only_to_their_watchers() -> None:
    live = LiveRows()
    live.update(fleet())
    assert live.version == 0  # nobody watches: nothing computed yet
    live.broadcaster.subscribe(on_drop=lambda: None)
    version, rows = live.current()
    assert version == 1 and set(rows) == {"atlas", "bolt"}
    atlas_gpus = Subscriber(asyncio.Queue(8), lambda: None)
    bolt_gpus = Subscriber(asyncio.Queue(8), lambda: None)
    live.gpu_watchers.update({atlas_gpus: frozenset({"atlas"}), bolt_gpus: frozenset({"bolt"})})

    changed = fleet(util=70.0)
    live.update(replace(changed, changed=frozenset({"atlas"})))
    [frame] = _frames(live)
    event, data = _data(frame)
    assert event == "rows" and data["v"] == 2
    assert data["hosts"] == {"atlas": {"util": "70 %", "util_pct": "70"}}
    [gpu_frame] = _queued(atlas_gpus)
    event, data = _data(gpu_frame)
    assert event == "gpus"
    assert data["hosts"] == {"atlas": {"0": {"util": "70 %", "util_pct": "70"}}}
    assert _queued(bolt_gpus) == []  # bolt's GPUs did not change

    live.update(replace(changed, changed=frozenset({"atlas"})))
    assert _frames(live) == [] and _queued(atlas_gpus) == []  # nothing differs: nothing sent


def _queued(subscriber: Subscriber) -> list[Frame | None]:
    frames = []
    while not subscriber.queue.empty():
        frames.append(subscriber.queue.get_nowait())
    return frames


async def test_a_gpu_gone_from_its_host_is_sent_as_removed_and_comes_back_whole() -> None:
    live = LiveRows()
    live.broadcaster.subscribe(on_drop=lambda: None)
    live.update(fleet())
    live.current()
    watcher = Subscriber(asyncio.Queue(8), lambda: None)
    live.gpu_watchers[watcher] = frozenset({"atlas"})
    before = fleet()
    atlas, bolt = before.hosts
    two_gpus = msgspec.structs.replace(atlas, gpus=atlas.gpus[:2])  # GPU 2 fell off the bus
    live.update(replace(before, hosts=(two_gpus, bolt), changed=frozenset({"atlas"})))
    [frame] = _queued(watcher)
    assert _data(frame) == ("gpus", {"v": 2, "hosts": {"atlas": {"2": None}}})
    assert set(live.current()[1]["atlas"].gpus) == {"atlas:0", "atlas:1"}

    live.update(before)  # it is back: every cell of its row, as for a row never seen
    [frame] = _queued(watcher)
    _event, data = _data(frame)
    assert data["hosts"] == {"atlas": {"2": _gpu_cells_shown(before, "atlas:2")}}


def _gpu_cells_shown(snapshot: FleetSnapshot, key: str) -> dict[str, str]:
    return dict(fleet_rows(snapshot, time.time())["atlas"].gpus[key])


async def test_a_gpu_stream_opens_with_every_gpu_of_its_hosts_marked_whole() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    live = LiveRows()
    live.update(fleet())
    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(None, live)))  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        reply = await client.get("/web/live/gpus", params={"h": "atlas"})
        first = await asyncio.wait_for(reply.content.readuntil(b"\n\n"), 5)
        reply.close()
    event, data = _data(first)
    # A page that reconnects drops rows of GPUs this does not list (gone while it was away).
    assert event == "gpus" and data["whole"] == ["atlas"]
    assert sorted(data["hosts"]["atlas"]) == ["0", "1", "2"]  # type: ignore[index]
    live.close()


async def test_a_host_not_read_yet_keeps_the_gpu_rows_a_page_shows() -> None:
    # A restarted server (or a new leader) knows no host's GPUs before its first reading.
    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    atlas, bolt = fleet().hosts
    unread = msgspec.structs.replace(atlas, state="unknown", report=None, last_seen=None, gpus=())
    live = LiveRows()
    live.update(FleetSnapshot(NOW, (unread, bolt), frozenset({"atlas", "bolt"})))
    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(None, live)))  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        reply = await client.get("/web/live/gpus", params={"all": "1"})
        first = await asyncio.wait_for(reply.content.readuntil(b"\n\n"), 5)
        reply.close()
    _event, data = _data(first)
    assert data["whole"] == ["bolt"] and data["hosts"]["atlas"] == {}  # type: ignore[index]
    live.close()

    watched = LiveRows()
    watched.broadcaster.subscribe(on_drop=lambda: None)
    watched.update(fleet())
    watched.current()
    watcher = Subscriber(asyncio.Queue(8), lambda: None)
    watched.gpu_watchers[watcher] = None
    watched.update(FleetSnapshot(NOW, (unread, bolt), frozenset({"atlas"})))
    assert all(None not in cells.values()  # type: ignore[union-attr]
               for frame in _queued(watcher) for cells in _data(frame)[1]["hosts"].values())


async def test_hosts_coming_or_going_ask_pages_to_reload() -> None:
    live = LiveRows()
    live.broadcaster.subscribe(on_drop=lambda: None)
    live.update(fleet())
    live.current()
    _frames(live)
    only_atlas = fleet()
    live.update(replace(only_atlas, hosts=only_atlas.hosts[:1]))
    [frame] = _frames(live)
    assert _data(frame)[0] == "reload"
    assert set(live.current()[1]) == {"atlas"}


async def test_a_page_watching_before_the_first_snapshot_gets_every_row_not_a_reload() -> None:
    # A restarted server: the page reconnects while its monitor has not reported yet, as it
    # would have after it (a full frame); a reload there would be a race the page can lose.
    live = LiveRows()
    live.broadcaster.subscribe(on_drop=lambda: None)
    assert live.current() == (0, {})
    live.update(fleet())
    [frame] = _frames(live)
    event, data = _data(frame)
    assert event == "rows" and set(data["hosts"]) == {"atlas", "bolt"}  # type: ignore[arg-type]


async def test_full_frame_has_every_host_cell_a_page_shows() -> None:
    live = LiveRows()
    live.update(fleet(last_seen=time.time() - 2))  # rows are computed at the real time
    event, data = _data(live.full_frame())
    assert event == "rows"
    atlas = data["hosts"]["atlas"]  # type: ignore[index]
    assert atlas["state"] == "up" and atlas["free"] == "1/3"
    assert "temp_n" not in atlas  # sort-only cells stay on the server


def test_blank_gpu_row_has_every_cell_of_a_real_one() -> None:
    from fleet.web.rows import GPU_CELLS, blank_gpu

    real = fleet_rows(fleet(), NOW)["atlas"].gpus["atlas:0"]
    assert tuple(real) == GPU_CELLS == tuple(blank_gpu())


async def test_overview_without_readings_says_why_not_that_nothing_matches() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(None, LiveRows())))  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        reply = await client.get("/web/")
        assert reply.status == 200
        assert "No live readings yet" in await reply.text()
        assert "Content-Security-Policy" in reply.headers


async def test_hostile_host_and_gpu_text_is_escaped_in_the_page_and_its_links() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    name = '<b onmouseover="x">h</b>&\x1b[31m'
    hostile = host(name, [gpu(name, 0, '<script>alert("g")</script>', 80, 1, 0.1, 40, 60)],
                   last_seen=time.time() - 1)
    live = LiveRows()
    live.update(FleetSnapshot(time.time(), (hostile,), frozenset({name})))
    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(None, live)))  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        page = await (await client.get("/web/")).text()
    assert "<b onmouseover" not in page and "<script>alert" not in page
    assert ">&lt;b onmouseover=&#34;x&#34;&gt;h&lt;/b&gt;&amp;?[31m</a>" in page  # ESC as "?"
    assert 'href="/web/hosts/%3Cb%20onmouseover%3D%22x%22%3Eh%3C/b%3E%26%1B%5B31m"' in page


async def test_overview_is_gzipped_for_a_browser_that_accepts_it_and_plain_otherwise() -> None:
    import gzip

    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    live = LiveRows()
    live.update(fleet())
    app = web.Application()
    app.add_subapp("/web/", web_app(WebContext(None, live)))  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1"), auto_decompress=False) as client:
        packed = await client.get("/web/", headers={"Accept-Encoding": "gzip, deflate, br"})
        plain = await client.get("/web/", headers={"Accept-Encoding": "identity"})
        refused = await client.get("/web/", headers={"Accept-Encoding": "gzip;q=0"})
        assert packed.headers["Content-Encoding"] == "gzip"
        assert packed.headers["Vary"] == "Accept-Encoding"
        page = gzip.decompress(await packed.read()).decode()
        assert 'data-host="atlas"' in page and 'data-host="bolt"' in page
        assert page.rstrip().endswith("</html>")
        for reply in (plain, refused):
            assert "Content-Encoding" not in reply.headers
            assert (await reply.read()).decode() == page  # the same page, as it is



async def test_a_page_load_shows_each_host_as_it_is_now_with_unchanged_hosts_reused() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from fleet.web.site import WebContext, web_app

    live = LiveRows()
    live.broadcaster.subscribe(on_drop=lambda: None)  # watched: updates patch the rows
    live.update(fleet(util=10.0, last_seen=time.time() - 1))
    context = WebContext(None, live)  # type: ignore[arg-type]
    app = web.Application()
    app.add_subapp("/web/", web_app(context))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        first = await (await client.get("/web/")).text()
        bolt_block = context.host_blocks.kept["bolt"][1]
        busier = fleet(util=70.0, last_seen=time.time() - 1)
        live.update(replace(busier, changed=frozenset({"atlas"})))
        second = await (await client.get("/web/")).text()
    assert '<span data-c="util">50 %</span>' in first  # atlas: (10 + 90 + 50) / 3 GPUs
    assert '<span data-c="util">70 %</span>' in second  # (70 + 90 + 50) / 3
    assert '<span data-c="util">50 %</span>' not in second
    assert context.host_blocks.kept["bolt"][1] is bolt_block  # bolt did not change
    assert second.count("<tbody data-host=") == 2
