"""A DataTable kept in sync with keyed rows by updating only the cells that changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual import events
from textual._two_way_dict import TwoWayDict
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from tui.format import safe_cell

Row = tuple[object, ...]


class KeyedTable(DataTable[object]):
    """Rows keyed by a stable string; `sync()` adds, removes and rewrites changed cells only.

    `fill` names a column (the last, a message) that takes the width the others leave, never
    less than its own: long text is cut at the screen's edge, not 40 columns before it.
    """

    def __init__(self, columns: Sequence[tuple[str, str, int]], *, id: str | None = None,
                 fill: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.column_spec = tuple(columns)
        self.fill = fill
        self.rows_by_key: dict[str, Row] = {}
        self._widths: tuple[int, ...] = ()

    def on_mount(self) -> None:
        self._set_columns(self._column_widths(self.size.width or self.app.size.width))

    def on_resize(self, event: events.Resize) -> None:
        widths = self._column_widths(event.size.width)
        if widths != self._widths:  # the fill column's width changed: columns and rows again
            selected = self.selected_key
            self.clear(columns=True)
            self._set_columns(widths)
            for key, cells in self.rows_by_key.items():
                self.add_row(*(safe_cell(cell) for cell in cells), key=key)
            if selected is not None:
                self.move_cursor(row=list(self.rows_by_key).index(selected))

    def _column_widths(self, table_width: int) -> tuple[int, ...]:
        widths = [width for _, _, width in self.column_spec]
        if self.fill is not None:
            index = [key for key, _, _ in self.column_spec].index(self.fill)
            padding = 2 * self.cell_padding * len(widths) + 2  # and the vertical scrollbar
            left = table_width - padding - (sum(widths) - widths[index])
            widths[index] = max(widths[index], left)
        return tuple(widths)

    def _set_columns(self, widths: tuple[int, ...]) -> None:
        self._widths = widths
        for (key, label, _), width in zip(self.column_spec, widths, strict=True):
            self.add_column(label, width=width, key=key)

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor."""
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def sync(self, wanted: Mapping[str, Row]) -> int:
        """Make the table show `wanted`, in its order; returns how many cells were written."""
        written = 0
        for key in [k for k in self.rows_by_key if k not in wanted]:
            self.remove_row(key)
            del self.rows_by_key[key]
        columns = [key for key, _, _ in self.column_spec]
        for key, cells in wanted.items():
            old = self.rows_by_key.get(key)
            if old is None:
                self.add_row(*(safe_cell(cell) for cell in cells), key=key)
                written += len(cells)
            elif old != cells:
                for column, before, after in zip(columns, old, cells, strict=True):
                    if before != after:
                        self.update_cell(key, column, safe_cell(after))
                        written += 1
            self.rows_by_key[key] = cells
        order = list(wanted)
        if list(self.rows_by_key) != order:
            self._reorder(order)
        return written

    def _reorder(self, order: list[str]) -> None:
        """Put the existing rows in `order` without re-adding them (what DataTable.sort does)."""
        self.rows_by_key = {key: self.rows_by_key[key] for key in order}
        self._row_locations = TwoWayDict({RowKey(key): index for index, key in enumerate(order)})
        self._update_count += 1
        self.refresh()
