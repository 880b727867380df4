"""Plain-text tables: aligned columns, untrusted text neutralised, no colours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.textsafe import safe_text


@dataclass(frozen=True)
class Column:
    """A table column: header, alignment ('<' or '>') and the widest a cell may be."""

    header: str
    align: str = "<"
    max_width: int = 48


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[object]]) -> str:
    """The rows as aligned text under a header line; None cells print as '-'."""
    cells = [
        [safe_text("-" if value is None else value, limit=column.max_width)
         for value, column in zip(row, columns, strict=True)]
        for row in rows
    ]
    widths = [len(column.header) for column in columns]
    for row_cells in cells:
        for position, cell in enumerate(row_cells):
            widths[position] = max(widths[position], len(cell))
    lines = [_line([column.header for column in columns], columns, widths)]
    lines.extend(_line(row_cells, columns, widths) for row_cells in cells)
    return "\n".join(lines)


def _line(values: Sequence[str], columns: Sequence[Column], widths: Sequence[int]) -> str:
    parts = [
        f"{value:{column.align}{width}}"
        for value, column, width in zip(values, columns, widths, strict=True)
    ]
    return "  ".join(parts).rstrip()


def format_bytes(value: int | None, *, unit: str = "GiB") -> str | None:
    """Bytes as a short number in `unit` (GiB or MiB); None stays None."""
    if value is None:
        return None
    divisor = 1024**3 if unit == "GiB" else 1024**2
    return f"{value / divisor:.1f}"


def format_number(value: float | None, digits: int = 0, suffix: str = "") -> str | None:
    """A rounded number with a suffix; None stays None."""
    if value is None:
        return None
    return f"{value:.{digits}f}{suffix}"
