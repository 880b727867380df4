"""Neutralising untrusted text (host names, GPU names, TXT records, task output) for terminals."""

from __future__ import annotations

import re

# C0 and C1 control characters except tab; ESC starts terminal escape sequences.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def safe_text(value: object, *, limit: int = 256) -> str:
    """`value` as a single printable line: control characters shown as '?', capped at `limit`."""
    text = value if isinstance(value, str) else str(value)
    text = _CONTROL.sub("?", text.replace("\t", " "))
    if len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text
