"""The overview's host blocks as rendered HTML, kept while the values they show stay the same.

At 1 Hz a fifth of a large fleet changes, so a page load renders the changed hosts' blocks and
reuses the others' (the 1,000-host overview: most of its 0.7 MB of HTML).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from markupsafe import Markup

from fleet.web.rows import Cells, HostRows

# What a host block shows: the name as shown, its cells, whether it has GPUs to expand.
Shown = tuple[str, Cells, bool]


@dataclass
class HostBlocks:
    """Rendered blocks by host name, each with the values it was rendered from."""

    kept: dict[str, tuple[Shown, Markup]] = field(default_factory=dict)

    def html(self, row: HostRows, render: Callable[[HostRows], Markup]) -> Markup:
        """`row`'s block: the kept one if it shows the same values, else `render(row)`."""
        shown = (row.label, row.cells, bool(row.gpus))
        found = self.kept.get(row.name)
        if found is not None and found[0] == shown:
            return found[1]
        block = render(row)
        self.kept[row.name] = (shown, block)
        return block

    def keep_only(self, names: Collection[str]) -> None:
        """Forget the blocks of hosts not in `names` (they left the fleet)."""
        if len(self.kept) > len(names):
            self.kept = {name: kept for name, kept in self.kept.items() if name in names}
