"""A one-line table cell's segments, built as Rich's pipeline builds them but without its layers.

DataTable renders every cell through `Styled(Padding(cell))` and `console.render_lines`: four
renderables, two line splits and an options copy per cell, about 0.3 ms each here, which is
most of the first frame of a 1,000-host table. For a Text that fits its column on one line
(no newline or tab, left or default justification) the result is fixed by three steps, each
done here with Rich's own code: the line as `Text.wrap` leaves it (padded inside the text when
justified left), its segments from `Text.render` of the joined line, and the padding segments
`Padding` and `render_lines` add. Anything else returns None and takes the full pipeline.
tests/tui/test_one_line_cell.py compares both on every kind of cell the tables show.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, OverflowMethod
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_SEPARATOR = Text("\n")  # what Text.__rich_console__ joins wrapped lines with
_FAST_JUSTIFY = frozenset({"default", "left"})


def one_line_segments(cell: object, width: int, padding: int, console: Console, *,
                      justify: str | None = None, overflow: OverflowMethod | None = None
                      ) -> list[Segment] | None:
    """The unstyled segments of `cell` in a `width`-wide, one-line cell with `padding` spaces
    each side, as `render_lines(Padding(cell, (0, padding)))` gives them; None when only that
    pipeline can say (not a Text, more than one line, a tab, wider than the cell, or centred
    or right-justified). `justify` and `overflow` are the console options' own."""
    inner = width - 2 * padding
    if not isinstance(cell, Text) or inner < 1:
        return None
    plain = cell.plain
    if "\n" in plain or "\t" in plain or cell_len(plain) > inner:
        return None
    line_justify = cell.justify or justify or "default"
    if line_justify not in _FAST_JUSTIFY:
        return None
    line = cell
    if line_justify == "left":  # Lines.justify pads a left-justified line inside the text
        line = cell.copy()
        line.truncate(inner, overflow=cell.overflow or overflow or "fold", pad=True)
    blank = console.get_style("none")  # Padding's style, also what render_lines pads with
    segments: list[Segment] = [Segment(" " * padding, blank)] if padding else []
    segments.extend(_SEPARATOR.join([line]).render(console))
    used = cell_len(line.plain)
    if used < inner:
        segments.append(Segment(" " * (inner - used), blank))
    if padding:
        segments.append(Segment(" " * padding, blank))
    return segments


def styled_line(segments: list[Segment], pre_style: Style, post_style: Style) -> list[Segment]:
    """`segments` under `pre_style` and over `post_style`, as textual's Styled applies them."""
    return list(Segment.apply_style(segments, style=pre_style, post_style=post_style))
