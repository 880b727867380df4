"""The fleet overview table: host rows expandable to GPU rows; only rows on screen are written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from textual import events
from textual._two_way_dict import TwoWayDict
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets.data_table import ColumnKey, RowKey

from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot
from tui import format as fmt
from tui.rows import (
    COLUMNS,
    Cells,
    FreeCounts,
    RowFilter,
    gpu_cells,
    host_cells,
    sort_key,
    visible_columns,
)
from tui.widgets.cell_cache import CellCachedTable

# Above this many rows to remove at once, rebuilding is cheaper than remove_row (O(rows) each).
REBUILD_REMOVALS = 64
AGE_COLUMN = 9  # index of "seen" in COLUMNS: the only cell that moves while a host is unchanged
# What a row holds until it is first on screen: its real cells are computed when it is shown.
BLANK: Cells = ("",) * len(COLUMNS)


class Source(NamedTuple):
    """What a row shows: a host (or one of its GPUs) as of one snapshot."""

    host: HostSnapshot
    gpu: GpuSnapshot | None
    expanded: bool
    generation: int  # bumped by apply(force=True) so every row is computed afresh


class FleetTable(CellCachedTable):
    """Rows keyed by host name ("atlas") and GPU ("atlas:3").

    `apply()` only orders the rows; a row's cells are computed and written into the table when
    the row is on screen (at the snapshot, or when scrolling or resizing brings it into view), and
    only the cells whose value changed are rewritten.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, fixed_columns=1)
        self.expanded: set[str] = set()
        self.row_filter = RowFilter()
        self.sort_name = "name"
        self.free_counts = FreeCounts()
        self._order: list[str] = []
        self._sources: dict[str, Source] = {}  # every row, shown or not
        self._computed: dict[str, tuple[Source, Cells]] = {}  # cells made for a source (age aside)
        self._written: dict[str, Cells] = {}  # what the DataTable holds for each row
        self._now = 0.0
        self._generation = 0
        self.updated_cells = 0  # cells the last apply() wrote into the table (tests, benchmark)
        self.written_cells = 0  # cells written since mount, at snapshots and scrolls alike
        self.shown_columns: tuple[str, ...] = ()  # the column keys shown (see rows.DROP_ORDER)
        self._blank_row: list[object] = []  # BLANK's shown cells, made once per column set

    def on_mount(self) -> None:
        self._show_columns(visible_columns(self.app.size.width))

    def on_resize(self, event: events.Resize) -> None:
        wanted = visible_columns(event.size.width)
        if wanted != self.shown_columns:
            selected = self.selected_key
            self._show_columns(wanted)
            if selected is not None:
                self._restore_cursor(selected)

    def _show_columns(self, keys: tuple[str, ...]) -> None:
        """Show only the columns `keys`; rows come back blank and are filled when on screen."""
        self.clear(columns=True)
        self.shown_columns = keys
        for key, label, width in COLUMNS:
            if key in keys:
                self.add_column(label, width=width, key=key)
        self._written = {}
        for row in self._order:
            self._add(row)

    def _add(self, key: str) -> None:
        if len(self._blank_row) != len(self.shown_columns):
            self._blank_row = self._shown(BLANK)
        self.add_row(*self._blank_row, key=key)
        self._written[key] = BLANK

    def _shown(self, cells: Cells) -> list[object]:
        """The cells of the visible columns, made safe for the terminal."""
        return [fmt.safe_cell(cell) for (key, _, _), cell in zip(COLUMNS, cells, strict=True)
                if key in self.shown_columns]

    @property
    def selected_key(self) -> str | None:
        """The row key under the cursor: a host name or "HOST:IDX"."""
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def apply(self, snapshot: FleetSnapshot, now: float, *, force: bool = False) -> bool:
        """Bring the table to `snapshot`; returns False when nothing on screen changed."""
        selected = self.selected_key
        if force:
            self._generation += 1
        self._now = now
        counts = self.free_counts
        counts.keep_only(snapshot.hosts)
        hosts = sorted((h for h in snapshot.hosts if self.row_filter.matches(h, now, counts)),
                       key=sort_key(self.sort_name, now, counts))
        order: list[str] = []
        sources: dict[str, Source] = {}
        for host in hosts:
            name = host.spec.name
            expanded = name in self.expanded and bool(host.gpus)
            order.append(name)
            sources[name] = Source(host, None, expanded, self._generation)
            if expanded:
                for gpu in host.gpus:
                    order.append(gpu.key)
                    sources[gpu.key] = Source(host, gpu, False, self._generation)
        self._sources = sources
        structure_changed = self._sync_rows(order)
        self.updated_cells = self._write(self._on_screen())
        if self.updated_cells:
            self.refresh()
        if structure_changed and selected is not None:
            self._restore_cursor(selected)
        return structure_changed or self.updated_cells > 0

    def _sync_rows(self, order: list[str]) -> bool:
        """Add, remove and reorder rows (new rows blank); returns whether any did."""
        gone = [key for key in self._order if key not in self._sources]
        if len(gone) > REBUILD_REMOVALS:
            self.clear()
            self._written = {}
            for key in order:
                self._add(key)
        else:
            for key in gone:
                self.remove_row(key)
                del self._written[key]
            for key in order:
                if key not in self._written:
                    self._add(key)
        for key in gone:
            self._computed.pop(key, None)
        structure_changed = bool(gone) or order != self._order
        if structure_changed:
            self._reorder(order)
        self._order = order
        return structure_changed

    def _on_screen(self) -> list[str]:
        """The keys of the rows in the viewport (rows are one line high)."""
        top = round(self.scroll_offset.y)
        return self._order[top:top + max(0, self.size.height - self.header_height) + 1]

    def _cells(self, key: str) -> Cells:
        """The row's cells now: computed again only when its source changed, else the age moves."""
        source = self._sources[key]
        known = self._computed.get(key)
        if known is not None and _same(known[0], source):
            cells = known[1]
        else:
            host, gpu = source.host, source.gpu
            cells = (host_cells(host, source.expanded, self._now) if gpu is None
                     else gpu_cells(host, gpu, self._now))
            self._computed[key] = (source, cells)
        if source.gpu is None:
            cells = _with_age(cells, _age(source.host, self._now))
        return cells

    def _write(self, keys: list[str]) -> int:
        """Write the changed cells of rows `keys` into the table; returns how many."""
        written = 0
        for key in keys:
            cells = self._cells(key)
            old = self._written[key]
            if old == cells:
                continue
            row = self._data[RowKey(key)]
            for (column, _, _), old_cell, new_cell in zip(COLUMNS, old, cells, strict=True):
                if old_cell != new_cell and column in self.shown_columns:
                    row[ColumnKey(column)] = fmt.safe_cell(new_cell)
                    written += 1
            self._written[key] = cells
        if written:
            self._update_count += 1  # DataTable's render caches are keyed on it
            self.written_cells += written
        return written

    def render_lines(self, crop: Region) -> list[Strip]:
        # Rows that scrolling, a resize or a cursor jump brought into view get their cells now;
        # a full repaint follows in case some of their lines were not part of this one.
        if self._write(self._on_screen()):
            self.refresh()
        return super().render_lines(crop)

    def _ensure_written(self, key: RowKey | str) -> None:
        name = key.value if isinstance(key, RowKey) else key
        if name is not None and name in self._sources:
            self._write([name])

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> object:
        """The cell as it is (or will be) shown, also for a row not on screen yet.

        (get_row is left as DataTable's: its renderer reads rows through it, and blank
        off-screen rows must stay blank there, or adding a row would compute its cells.)"""
        self._ensure_written(row_key)
        return super().get_cell(row_key, column_key)

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # Columns have fixed widths and rows are one line without labels: DataTable's measuring
        # of every new row's cells (all 1,000 rows at the first snapshot) would change nothing.
        super()._update_dimensions(())

    def _reorder(self, order: list[str]) -> None:
        """Put existing rows in `order` without re-adding them (what DataTable.sort does)."""
        self._row_locations = TwoWayDict({RowKey(key): index for index, key in enumerate(order)})
        self._update_count += 1
        self.refresh()

    def _restore_cursor(self, key: str) -> None:
        """Keep the cursor on the same host/GPU after rows moved (or on its host if hidden)."""
        target = key if key in self._sources else key.split(":")[0]
        if target in self._sources:
            index = self._order.index(target)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)


def _same(made_for: Source, source: Source) -> bool:
    """Whether cells made for `made_for` still show `source` (same snapshot values)."""
    return (made_for.generation == source.generation and made_for.expanded == source.expanded
            and (made_for.host is source.host or made_for.host == source.host)
            and made_for.gpu == source.gpu)


def _age(host: HostSnapshot, now: float) -> str:
    """The age cell of a host whose snapshot did not change (it moves with the clock)."""
    return fmt.age(now - host.last_seen if host.last_seen is not None else None)


def _with_age(cells: Cells, age: str) -> Cells:
    if cells[AGE_COLUMN] == age:
        return cells
    return (*cells[:AGE_COLUMN], age, *cells[AGE_COLUMN + 1:])
