"""The probe output's text cleaning and warning cap, shared by the typed and the lenient parser."""

from __future__ import annotations

import re
import unicodedata

from fleet.probe.limits import MAX_NAME_CHARS, MAX_WARNINGS

# Terminal escape sequences (CSI, OSC, other ESC-introduced) removed whole, before single
# control and format characters (C0, C1, DEL, bidi overrides) are dropped.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, ended by BEL or ST
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)


def sanitize_text(value: str, limit: int = MAX_NAME_CHARS) -> str:
    """value without terminal escapes or control/format characters, at most `limit` chars."""
    if value.isascii() and value.isprintable():  # the common case: nothing to remove
        cleaned = value.strip()
        return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
    without_escapes = _ESCAPE_SEQUENCE.sub("", value)
    printable = "".join(
        char for char in without_escapes if unicodedata.category(char) not in ("Cc", "Cf", "Cs")
    )
    cleaned = printable.strip()
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    return cleaned


def capped_warnings(warnings: list[str]) -> tuple[str, ...]:
    """At most MAX_WARNINGS warnings, plus one saying how many more were dropped."""
    if len(warnings) > MAX_WARNINGS:
        dropped = len(warnings) - MAX_WARNINGS
        warnings = [*warnings[:MAX_WARNINGS], f"{dropped} more warnings dropped"]
    return tuple(warnings)
