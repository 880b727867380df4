"""The one-line cell renderer gives DataTable's own segments, cell for cell, in every state a
cell is drawn in (zebra rows, cursor, hover, fixed column), and steps aside where it cannot."""

from __future__ import annotations

from rich.console import Console
from rich.style import Style
from rich.text import Span, Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from fleet.snapshot import FleetSnapshot
from tests.tui.fake_service import NOW, FakeService, gpu, host
from tui.app import FleetApp
from tui.rows import gpu_cells, host_cells
from tui.widgets.cell_cache import CellCachedTable
from tui.widgets.fleet_table import FleetTable
from tui.widgets.one_line_cell import one_line_segments

WIDTH = 12  # the test table's column width (10 of text, a space each side)

CELLS: list[object] = [
    "plain", "[b]bold[/] mark", "", "exactly10c", "漢字 wide", "x" * 10,
    Text("styled", style="bold red"), Text("spans", spans=[Span(1, 3, "green")]),
    Text("both", style="italic", spans=[Span(0, 2, "reverse")]), Text(""),
    Text("left", justify="left", style="on blue"), Text("left", justify="left"),
    Text("ends", end="\n"), Text("  spaced  "), Text("overflow", overflow="ellipsis"),
    Text("default", justify="default"), 42, 3.5, None,
    "two\nlines",  # DataTable keeps a one-line row's first line only
]
# Cells the full pipeline alone renders: the renderer must say so rather than guess.
SLOW_CELLS: list[object] = [
    "much longer than ten cells", "a\ttab", Text("two\nlines"), Text("right", justify="right"),
    Text("centre", justify="center"), Text("full", justify="full"),
]


class CellsApp(App[None]):
    """One CellCachedTable holding every kind of cell, one per row, twice per row."""

    def compose(self) -> ComposeResult:
        table = CellCachedTable(id="cells", fixed_columns=1)
        for name in ("fixed", "a", "b"):
            table.add_column(name, width=WIDTH - 2 * table.cell_padding, key=name)
        for index, cell in enumerate(CELLS + SLOW_CELLS):
            table.add_row(f"row{index}", cell, cell, key=str(index), height=1)
        yield table


def _reference(table: DataTable[object], row: int, column: int, width: int, cursor: bool,
               hover: bool) -> object:
    """DataTable's own rendering of the cell, past every cache of ours."""
    return DataTable._render_cell(table, row, column, table.rich_style, width, cursor, hover)


async def test_fast_cells_equal_datatable_in_every_state() -> None:
    app = CellsApp()
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(CellCachedTable)
        compared = 0
        for row in range(len(CELLS)):
            for column in range(3):
                for cursor, hover in ((False, False), (True, False), (False, True), (True, True)):
                    for show_hover in (False, True):
                        table._show_hover_cursor = show_hover
                        fast = table._render_one_line(row, column, table.rich_style, WIDTH,
                                                      cursor, hover)
                        assert fast is not None, (CELLS[row], column)
                        assert fast == _reference(table, row, column, WIDTH, cursor, hover), (
                            CELLS[row], column, cursor, hover, show_hover)
                        compared += 1
        assert compared == len(CELLS) * 3 * 8


async def test_cells_it_cannot_render_take_datatables_path() -> None:
    app = CellsApp()
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(CellCachedTable)
        for offset, cell in enumerate(SLOW_CELLS):
            row = len(CELLS) + offset
            assert table._render_one_line(row, 1, table.rich_style, WIDTH, False, False) is None
            # ...and what the table draws for it is still DataTable's rendering
            assert table._render_cell(row, 1, table.rich_style, WIDTH) == _reference(
                table, row, 1, WIDTH, False, False), cell


def test_one_line_segments_refuses_what_it_cannot_know() -> None:
    console = Console(width=40)
    assert one_line_segments("a str, not yet a Text", 12, 1, console) is None
    assert one_line_segments(Text("x"), 2, 1, console) is None  # no room inside the padding
    assert one_line_segments(Text("x"), 12, 1, console, justify="right") is None
    plain = one_line_segments(Text("ab", style="bold"), 6, 1, console)
    assert plain is not None
    assert "".join(segment.text for segment in plain) == " ab   "
    assert [segment.style for segment in plain][1] == Style.parse("bold")


async def test_every_overview_cell_equals_datatable() -> None:
    """The cells the overview really shows: hosts up, down, hot, with GPU rows expanded."""
    hosts = (host("alpha", [gpu("alpha", 0, "NVIDIA H100 80GB HBM3", 80, 97, 70, 91, 650),
                            gpu("alpha", 1, "NVIDIA H100 80GB HBM3", 80, 0, 0.1, 35, 60)]),
             host("beta", [gpu("beta", 0, "NVIDIA L4", 24, 12, 3, 44, 30)], state="down"),
             host("gamma-with-a-very-long-host-name", []))
    snapshot = FleetSnapshot(taken_at=NOW, hosts=hosts,
                             changed=frozenset(h.spec.name for h in hosts))
    app = FleetApp(FakeService(snapshot=snapshot), clock=lambda: NOW)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(FleetTable)
        table.expanded.add("alpha")
        table.apply(snapshot, NOW, force=True)
        await pilot.pause()
        assert host_cells(hosts[0], True, NOW) and gpu_cells(hosts[0], hosts[0].gpus[0], NOW)
        fast_cells = 0
        for row in range(table.row_count):
            for column, column_info in enumerate(table.ordered_columns):
                width = column_info.get_render_width(table)
                for cursor in (False, True):
                    fast = table._render_one_line(row, column, table.rich_style, width, cursor,
                                                  False)
                    if fast is not None:
                        fast_cells += 1
                        assert fast == _reference(table, row, column, width, cursor, False), (
                            table.ordered_rows[row].key.value, column_info.key.value)
        # the renderer must be what the overview uses for nearly all of its cells
        assert fast_cells >= 0.9 * 2 * table.row_count * len(table.ordered_columns)
