"""Live updates: only changed cells are rewritten, unchanged ticks are skipped, the selection
stays on its host while rows move, and odd hosts (long names, no GPUs, missing fields) render."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest
from rich.text import Text

from fleet.snapshot import FleetSnapshot
from tests.tui.conftest import settle
from tests.tui.fake_service import LONG_NAME, NOW, FakeService, gpu, host, standard_fleet
from tui.app import FleetApp
from tui.widgets.fleet_table import FleetTable


def with_cygnus_util(snapshot: FleetSnapshot, util: float) -> FleetSnapshot:
    hosts = tuple(
        host("cygnus", [gpu("cygnus", i, "NVIDIA GeForce RTX 4090", 24, util, 0.3, 60, 300)
                        for i in range(2)], load=0.1)
        if h.spec.name == "cygnus" else h for h in snapshot.hosts)
    return replace(snapshot, hosts=hosts, changed=frozenset({"cygnus"}))


async def test_a_changed_host_rewrites_only_its_changed_cells(app: FleetApp, fake: FakeService
                                                              ) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert app.snapshots_seen == 1
        fake.push(with_cygnus_util(fake.snapshot, 80))
        await settle(pilot)
        assert app.snapshots_seen == 2
        # util bar, memory, temperature, power and the GPU strip of one row; nothing else
        assert table.updated_cells == 5
        assert "80%" in str(table.get_cell("cygnus", "util"))
        assert str(table.get_cell("cygnus", "gpus")) == "2/2"


async def test_an_identical_snapshot_rewrites_nothing(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert table.apply(standard_fleet(), NOW) is False
        assert table.updated_cells == 0


async def test_selection_follows_its_host_when_the_sort_moves_it(app: FleetApp,
                                                                 fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("s")  # sort by util: cygnus (0 %) sits low
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        table.move_cursor(row=table._order.index("cygnus"))
        await settle(pilot)
        before = table._order.index("cygnus")
        fake.push(with_cygnus_util(fake.snapshot, 100))  # now the busiest host
        await settle(pilot)
        assert table._order[0] == "cygnus" and before != 0
        assert table.selected_key == "cygnus"


async def test_hosts_coming_and_going_keep_other_rows(app: FleetApp, fake: FakeService) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        snapshot = fake.snapshot
        fewer = replace(snapshot, hosts=tuple(h for h in snapshot.hosts
                                              if h.spec.name != "draco"))
        fake.push(fewer)
        await settle(pilot)
        assert "draco" not in table._order and table.row_count == 6
        fake.push(snapshot)
        await settle(pilot)
        assert "draco" in table._order and table.row_count == 7


async def test_odd_hosts_render_without_breaking_the_layout(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        name = str(table.get_cell(LONG_NAME, "name"))
        assert name.endswith("…") and len(name) <= 17
        assert str(table.get_cell("fornax", "strip")) == "no GPUs"
        assert str(table.get_cell("fornax", "gpus")) == "0"
        assert str(table.get_cell("draco", "state")) == "UNREACH"
        assert str(table.get_cell("draco", "seen")) == "5m"
        assert str(table.get_cell("boreas", "state")) == "HOT"


async def test_at_80_columns_the_overview_drops_columns_in_the_documented_order(
        app: FleetApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        shown = [str(column.label) for column in table.columns.values()]
        assert shown[:6] == ["Host / GPU", "State", "Free", "Util", "Memory", "Temp"]
        assert not {"GPUs", "Seen", "Load"} & set(shown)
        assert sum(c.get_render_width(table) for c in table.columns.values()) <= 80
        assert str(table.get_cell("atlas", "gpus")) == "5/8"
        await pilot.resize_terminal(120, 36)
        await settle(pilot)
        assert [str(c.label) for c in table.columns.values()][-1] == "GPUs"
        assert str(table.get_cell("draco", "seen")) == "5m"


async def test_a_down_host_shows_its_last_values_dim_and_marked_stale(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        cygnus_temp = table.get_cell("cygnus", "temp")
        assert isinstance(cygnus_temp, Text) and "dim" not in str(cygnus_temp.style)
        table.move_cursor(row=table._order.index("draco"))  # unreachable: its last report
        await pilot.press("space")
        await settle(pilot)
        for key in ("draco", "draco:0"):
            util = table.get_cell(key, "util")
            assert isinstance(util, Text) and "stale" in util.plain, key
            assert util.style == "dim", key
        draco = standard_fleet().host("draco")
        assert draco is not None
        up_again = msgspec.structs.replace(draco, state="up", reason=None)
        fake = app.service
        assert isinstance(fake, FakeService)
        fake.push(replace(fake.snapshot, hosts=tuple(up_again if h.spec.name == "draco" else h
                                                     for h in fake.snapshot.hosts)))
        await settle(pilot)
        assert "stale" not in str(table.get_cell("draco", "util"))


async def test_resizing_keeps_rows_and_selection(app: FleetApp) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down")
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert table.size.width <= 80 and table.row_count == 7
        assert table.selected_key == "boreas"
        await pilot.resize_terminal(200, 60)
        await settle(pilot)
        assert table.selected_key == "boreas"


def test_no_color_is_respected(monkeypatch: object, fake: FakeService) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("NO_COLOR", "1")
    assert FleetApp(fake, clock=lambda: NOW).no_color


ALWAYS_SHOWN = ("name", "state", "gpus", "util", "temp")
# The README's words for the columns that may be dropped.
README_COLUMN_NAMES = {"GPU strip": "strip", "last seen": "seen", "load": "load",
                       "power": "power", "allocations": "alloc", "memory": "mem"}


def _needed(keys: tuple[str, ...] | list[str]) -> int:
    from tui.rows import CELL_PADDING, COLUMN_WIDTHS, SCROLLBAR

    return sum(COLUMN_WIDTHS[key] + CELL_PADDING for key in keys) + SCROLLBAR


@pytest.mark.parametrize("width", range(40, 141))
def test_narrow_overviews_drop_columns_in_the_documented_order(width: int) -> None:
    from tui.rows import COLUMNS, DROP_ORDER, visible_columns

    every = [key for key, _, _ in COLUMNS]
    shown = visible_columns(width)
    dropped = [key for key in every if key not in shown]

    assert list(shown) == [key for key in every if key in shown]  # the table's own order
    assert set(ALWAYS_SHOWN) <= set(shown)
    assert set(dropped) == set(DROP_ORDER[:len(dropped)])  # the first ones of DROP_ORDER
    if len(dropped) < len(DROP_ORDER):
        assert _needed(shown) <= width  # what is kept fits
    if dropped:  # and no more was dropped than needed
        last = DROP_ORDER[len(dropped) - 1]
        assert _needed([key for key in every if key in shown or key == last]) > width
    if width >= 80:
        assert "mem" in shown  # at 80×24 memory stays too, as the README says


def test_the_readme_lists_the_drop_order() -> None:
    import re
    from pathlib import Path

    from tui.rows import DROP_ORDER

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    match = re.search(r"narrower terminals drop columns in this order: ([^(]+?) \(", readme)
    assert match is not None, "the README's TUI section no longer states the drop order"
    named = [README_COLUMN_NAMES[name.strip()] for name in match.group(1).split(",")]
    assert tuple(named) == DROP_ORDER
