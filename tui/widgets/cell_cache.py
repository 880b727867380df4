"""A DataTable whose rendered cells survive changes to other cells (cached by the cell's value)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.widget import PseudoClasses
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

Lines = list[list[Segment]]
# A row's cells are cached per column and style: DataTable renders a fixed column twice per line,
# in two styles.
CellKey = tuple[ColumnKey, Style]
# What a cell's rendering depends on besides its value and style: position (mouse meta, fixed
# column), width, cursor and hover state.
Context = tuple[int, int, int, bool, bool, bool, bool, PseudoClasses]


class CellCachedTable(DataTable[object]):
    """DataTable keys its cell cache on a counter that every `update_cell` bumps, so one changed
    cell re-renders every visible cell; here a cell is rendered again only when its value object
    or its context changed."""

    def __init__(self, *, id: str | None = None, fixed_columns: int = 0) -> None:
        # Set first: DataTable's __init__ already clears caches (see _clear_caches).
        self._rendered: dict[RowKey, dict[CellKey, tuple[object, Context, Lines]]] = {}
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, fixed_columns=fixed_columns)
        self.cells_rendered = 0  # cells rendered anew since mount (tests, benchmark)

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> Lines:
        if row_index < 0 or column_index < 0:  # the header and row labels: DataTable's own cache
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = self._data[row_key][column_key]
        context: Context = (row_index, column_index, width, cursor, hover,
                            self._show_hover_cursor, self.show_cursor, self._pseudo_class_state)
        row = self._rendered.setdefault(row_key, {})
        known = row.get((column_key, base_style))
        # The cache holds a reference to the value, so an `is` match cannot be a reused id.
        if known is not None and known[0] is value and known[1] == context:
            return known[2]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row[column_key, base_style] = (value, context, lines)
        self.cells_rendered += 1
        return lines

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._rendered.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rendered.clear()

    def remove_row(self, row_key: RowKey | str) -> None:
        super().remove_row(row_key)
        self._rendered.pop(RowKey(row_key) if isinstance(row_key, str) else row_key, None)
