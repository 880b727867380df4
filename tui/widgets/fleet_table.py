"""The fleet overview table: host rows expandable to GPU rows, updated by diffing cells."""

from __future__ import annotations

from textual import events
from textual._two_way_dict import TwoWayDict
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from fleet.snapshot import FleetSnapshot, HostSnapshot
from tui import format as fmt
from tui.rows import COLUMNS, Cells, RowFilter, gpu_cells, host_cells, sort_key, visible_columns

# Above this many rows to remove at once, rebuilding is cheaper than remove_row (O(rows) each).
REBUILD_REMOVALS = 64
AGE_COLUMN = 9  # index of "seen" in COLUMNS: the only cell that moves while a host is unchanged


class FleetTable(DataTable[object]):
    """Rows keyed by host name ("atlas") and GPU ("atlas:3"); only changed cells are redrawn."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, fixed_columns=1)
        self.expanded: set[str] = set()
        self.row_filter = RowFilter()
        self.sort_name = "name"
        self._cells: dict[str, Cells] = {}
        self._hosts: dict[str, HostSnapshot] = {}
        self._order: list[str] = []
        self.updated_cells = 0  # how many cells the last apply() rewrote (tests, benchmark)
        self.shown_columns: tuple[str, ...] = ()  # the column keys shown (see rows.DROP_ORDER)

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
        """Show only the columns `keys`, re-adding the rows from the cells already computed."""
        self.clear(columns=True)
        self.shown_columns = keys
        for key, label, width in COLUMNS:
            if key in keys:
                self.add_column(label, width=width, key=key)
        for row in self._order:
            self.add_row(*self._shown(self._cells[row]), key=row)

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
        hosts = sorted((h for h in snapshot.hosts if self.row_filter.matches(h, now)),
                       key=sort_key(self.sort_name, now))
        order: list[str] = []
        wanted: dict[str, Cells] = {}
        for host in hosts:
            name = host.spec.name
            expanded = name in self.expanded and bool(host.gpus)
            order.append(name)
            previous = self._hosts.get(name)
            cells = self._cells.get(name)
            if force or cells is None or previous != host or _marker_changed(cells, expanded):
                cells = host_cells(host, expanded, now)
            else:
                cells = _with_age(cells, _age(host, now))
            wanted[name] = cells
            self._hosts[name] = host
            if expanded:
                for gpu in host.gpus:
                    order.append(gpu.key)
                    wanted[gpu.key] = (self._cells[gpu.key]
                                       if not force and previous == host and gpu.key in self._cells
                                       else gpu_cells(host, gpu, now))
        changed = self._sync_rows(order, wanted)
        if changed and selected is not None:
            self._restore_cursor(selected)
        return changed

    def _sync_rows(self, order: list[str], wanted: dict[str, Cells]) -> bool:
        gone = [key for key in self._order if key not in wanted]
        self.updated_cells = 0
        if len(gone) > REBUILD_REMOVALS:
            self._rebuild(order, wanted)
            return True
        for key in gone:
            self.remove_row(key)
            del self._cells[key]
        column_keys = [key for key, _, _ in COLUMNS]
        for key in order:
            cells = wanted[key]
            old = self._cells.get(key)
            if old is None:
                self.add_row(*self._shown(cells), key=key)
                self.updated_cells += len(cells)
            elif old != cells:
                for column, old_cell, new_cell in zip(column_keys, old, cells, strict=True):
                    if old_cell != new_cell and column in self.shown_columns:
                        self.update_cell(key, column, fmt.safe_cell(new_cell))
                        self.updated_cells += 1
            self._cells[key] = cells
        structure_changed = order != self._order
        if structure_changed:
            self._reorder(order)
        self._order = order
        for name in [name for name in self._hosts if name not in wanted]:
            del self._hosts[name]
        return structure_changed or bool(gone) or self.updated_cells > 0

    def _rebuild(self, order: list[str], wanted: dict[str, Cells]) -> None:
        self.clear()
        self._cells = {}
        for key in order:
            self.add_row(*self._shown(wanted[key]), key=key)
            self._cells[key] = wanted[key]
        self.updated_cells = len(order) * len(COLUMNS)
        self._order = order
        self._hosts = {name: host for name, host in self._hosts.items() if name in wanted}

    def _reorder(self, order: list[str]) -> None:
        """Put existing rows in `order` without re-adding them (what DataTable.sort does)."""
        self._row_locations = TwoWayDict({RowKey(key): index for index, key in enumerate(order)})
        self._update_count += 1
        self.refresh()

    def _restore_cursor(self, key: str) -> None:
        """Keep the cursor on the same host/GPU after rows moved (or on its host if hidden)."""
        target = key if key in self._cells else key.split(":")[0]
        if target in self._cells:
            index = self._order.index(target)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)


def _age(host: HostSnapshot, now: float) -> str:
    """The age cell of a host whose snapshot did not change (it moves with the clock)."""
    return fmt.age(now - host.last_seen if host.last_seen is not None else None)


def _with_age(cells: Cells, age: str) -> Cells:
    if cells[AGE_COLUMN] == age:
        return cells
    return (*cells[:AGE_COLUMN], age, *cells[AGE_COLUMN + 1:])


def _marker_changed(cells: Cells, expanded: bool) -> bool:
    """Whether the ▸/▾ marker of a host row disagrees with its expanded state."""
    text = str(cells[0])
    return ("▾" in text[:2]) != expanded
