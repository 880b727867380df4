"""At fleet scale the overview writes and renders only what is on screen: rows off screen get
their cells when scrolled into view, and a changed cell re-renders alone."""

from __future__ import annotations

from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import NOW, FakeService, gpu, host
from tui.app import FleetApp
from tui.rows import COLUMNS
from tui.widgets.fleet_table import FleetTable

HOSTS = 300  # ten screens of rows at 120×36


def big_fleet(util: float) -> FleetSnapshot:
    """HOSTS hosts of two GPUs, every one at `util` percent."""
    hosts = tuple(host(f"node{i:03d}", [gpu(f"node{i:03d}", g, "NVIDIA L4", 24, util, 0.1, 40, 50)
                                        for g in range(2)]) for i in range(HOSTS))
    return FleetSnapshot(taken_at=NOW, hosts=hosts, changed=frozenset(h.spec.name for h in hosts))


async def test_snapshots_write_only_the_rows_on_screen() -> None:
    fake = FakeService(snapshot=big_fleet(10))
    app = FleetApp(fake, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        on_screen = table.size.height - table.header_height
        # the first snapshot added every row, but only the rows on screen got their cells
        assert 0 < table.written_cells <= len(COLUMNS) * (on_screen + 1)
        before = table.written_cells
        fake.push(big_fleet(80))
        await settle(pilot)
        written = table.written_cells - before
        # util, the GPU strip and nothing else changed, on each row on screen (+1: a partial row)
        assert 2 * on_screen <= written <= 2 * (on_screen + 1)
        assert written < HOSTS * 2 // 5


async def test_rows_changed_off_screen_show_their_new_values_when_scrolled_to() -> None:
    fake = FakeService(snapshot=big_fleet(10))
    app = FleetApp(fake, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        fake.push(big_fleet(80))
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        table.move_cursor(row=HOSTS - 1)  # the table scrolls with its cursor
        await settle(pilot)
        assert table.scroll_offset.y > 0
        screen_text = app.export_screenshot()
        assert f"node{HOSTS - 1:03d}" in screen_text
        assert " 80%" in screen_text.replace("&#160;", " ")
        assert " 10%" not in screen_text.replace("&#160;", " ")


async def test_one_changed_host_re_renders_only_its_changed_cells(app: FleetApp,
                                                                  fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        rendered = table.cells_rendered
        cygnus = [gpu("cygnus", i, "NVIDIA GeForce RTX 4090", 24, 80, 0.3, 60, 300)
                  for i in range(2)]
        hosts = tuple(host("cygnus", cygnus, load=0.1) if h.spec.name == "cygnus" else h
                      for h in fake.snapshot.hosts)
        fake.push(FleetSnapshot(taken_at=NOW, hosts=hosts, changed=frozenset({"cygnus"})))
        await settle(pilot)
        assert table.updated_cells == 5  # util, memory, temperature, power, GPU strip
        # DataTable alone would render every visible cell again (its cache is per update)
        assert table.cells_rendered - rendered == table.updated_cells
        assert len(COLUMNS) * len(fake.snapshot.hosts) > 2 * table.updated_cells
