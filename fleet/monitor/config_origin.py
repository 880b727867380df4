"""Where a failed settings check points: the key it names that the last file set, and where
each of its keys came from."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from fleet.errors import ConfigError

DEFAULT_ORIGIN = "default"


def section_error(name: str, section_type: type, exc: Exception, origins: dict[str, str],
                  where: str | None, files: Sequence[str],
                  section_lines: Sequence[dict[str, str]]) -> ConfigError:
    """A section's own check failed: the error is placed at the key it names that the last
    layer set (at the section's line when one file set several of them, or none of them), and
    when the keys it names come from different places (a settings file, the inventory, the
    defaults), each one's origin is said. `files` are the layers' files, lowest first, and
    `section_lines` each layer's section → "FILE:LINE"."""
    named = [field.name for field in dataclasses.fields(section_type)
             if re.search(rf"\b{re.escape(field.name)}\b", str(exc))]
    found = {key: origins[f"{name}.{key}"] for key in named}
    set_here = [origin for origin in found.values() if origin != DEFAULT_ORIGIN]
    message = f"settings section {name!r}: {exc}"
    if set_here:
        order = list(files)

        def rank(origin: str) -> int:
            path = origin.rpartition(":")[0]
            return order.index(path) if path in order else -1

        where = max(set_here, key=rank)
        paths = {origin.rpartition(":")[0] for origin in set_here}
        if len(set_here) > 1 and len(paths) == 1:  # keys of one section of one file: there
            where = section_lines[rank(where)].get(name, where)
        if len({origin.rpartition(":")[0] for origin in found.values()}) > 1:
            message += " (" + "; ".join(
                f"{key} from " + ("the defaults" if origin == DEFAULT_ORIGIN else origin)
                for key, origin in found.items()) + ")"
    path, _, line = (where or "").rpartition(":")
    return ConfigError(message, path=path or None, line=int(line) if line.isdigit() else None)
