"""A one-line history plot scaled against a known maximum, blank where there is no sample."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from tui import format as fmt

NO_SAMPLE = " "


def plot_text(values: Sequence[float | None], maximum: float, warn: float | None = None,
              hot: float | None = None) -> Text:
    """One glyph per value: its height is value/maximum (▁ for 0 to █ for the maximum).

    None (no sample in that time slot, e.g. before the first one) is blank, never 0. The
    scale is fixed (utilisation against 100 %, memory against the GPU's total), so a constant
    0.8 GiB of 80 GiB is a low line, not a full bar. `warn`/`hot` colour values as percentages
    of the maximum.
    """
    text = Text()
    top = maximum if maximum > 0 else 1.0
    for value in values:
        if value is None:
            text.append(NO_SAMPLE)
            continue
        ratio = max(0.0, min(1.0, value / top))
        glyph = fmt.LEVELS[min(len(fmt.LEVELS) - 1, int(ratio * len(fmt.LEVELS)))]
        style = fmt.level_style(ratio * 100, warn, hot) if warn is not None and hot is not None \
            else "cyan"
        text.append(glyph, style=style)
    return text


class HistoryPlot(Static):
    """A Static showing `plot_text`; `values` holds what it draws (for tests)."""

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.values: list[float | None] = []
        self.maximum = 1.0

    def plot(self, values: Sequence[float | None], maximum: float, warn: float | None = None,
             hot: float | None = None) -> None:
        """Draw `values` scaled against `maximum`."""
        self.values = list(values)
        self.maximum = maximum
        self.update(plot_text(values, maximum, warn, hot))
