"""Pure text formatting for the TUI: sizes, ages, bars and colour thresholds (no widgets)."""

from __future__ import annotations

from rich.text import Text

from fleet.textsafe import safe_text

_UNLIMITED = 1 << 30

# Colour thresholds (percent / degrees C): below WARN is calm, from WARN busy, from HOT alarming.
UTIL_WARN, UTIL_HOT = 50.0, 90.0
MEM_WARN, MEM_HOT = 60.0, 90.0
TEMP_WARN, TEMP_HOT = 75.0, 85.0

CALM, WARN, HOT, MUTED = "green", "yellow", "bold red", "grey50"
STALE, STALE_MARK = "dim", "stale"  # last-known values of a host that is not up
BAR_EIGHTHS = " ▏▎▍▌▋▊▉█"
LEVELS = "▁▂▃▄▅▆▇█"
MISSING = "–"

STATE_STYLES = {
    "up": "green",
    "unknown": MUTED,
    "down": "bold red",
    "unreachable": "bold red",
    "auth_failed": "bold red",
    "host_key_rejected": "bold red",
    "probe_error": "red",
}
STATE_LABELS = {
    "up": "up",
    "unknown": "unknown",
    "down": "DOWN",
    "unreachable": "UNREACH",
    "auth_failed": "AUTH",
    "host_key_rejected": "HOSTKEY",
    "probe_error": "PROBE!",
}
GPU_STATE_LABELS = {"ok": "ok", "hot": "HOT", "failed": "FAILED", "degraded": "DEGRADED",
                    "lost": "LOST"}


def level_style(value: float | None, warn: float, hot: float) -> str:
    """The colour for a value against its thresholds (muted when unknown)."""
    if value is None:
        return MUTED
    if value >= hot:
        return HOT
    if value >= warn:
        return WARN
    return CALM


def bar(pct: float | None, width: int) -> str:
    """A horizontal bar of `width` cells filled to `pct` percent with eighth-cell precision."""
    if pct is None:
        return " " * width
    eighths = round(max(0.0, min(100.0, pct)) / 100 * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (BAR_EIGHTHS[part] if part and full < width else "")
    return text.ljust(width)


def pct_bar(pct: float | None, width: int, warn: float, hot: float) -> Text:
    """A coloured bar followed by the percentage, e.g. `█████▌    56%`."""
    if pct is None:
        return Text(" " * (width + 1) + MISSING.rjust(3), style=MUTED)
    return Text(f"{bar(pct, width)} {pct:3.0f}%", style=level_style(pct, warn, hot))


def levels(values: list[float | None]) -> Text:
    """One block glyph per value (0–100), coloured per value: a GPU strip like `▇▁▃█`."""
    text = Text()
    for value in values:
        if value is None:
            text.append("·", style=MUTED)
        else:
            index = min(len(LEVELS) - 1, int(max(0.0, value) / 100 * len(LEVELS)))
            text.append(LEVELS[index], style=level_style(value, UTIL_WARN, UTIL_HOT))
    return text


def gib(value: float | None) -> str:
    """Bytes as GiB with one decimal below 100 GiB (`23.4`, `640`), or `–`."""
    if value is None:
        return MISSING
    amount = value / 1024**3
    return f"{amount:.1f}" if amount < 99.95 else f"{amount:.0f}"


def memory(used: float | None, total: float | None) -> Text:
    """`used/totalG` coloured by the used fraction."""
    if used is None or not total:
        return Text(MISSING if total is None else f"{MISSING}/{gib(total)}G", style=MUTED)
    return Text(f"{gib(used)}/{gib(total)}G",
                style=level_style(used / total * 100, MEM_WARN, MEM_HOT))


def temperature(value: float | None) -> Text:
    """`85°` coloured by the temperature thresholds."""
    if value is None:
        return Text(MISSING, style=MUTED)
    return Text(f"{value:.0f}°", style=level_style(value, TEMP_WARN, TEMP_HOT))


def watts(value: float | None) -> str:
    """`350W`, `3.2kW` or `–`."""
    if value is None:
        return MISSING
    return f"{value / 1000:.1f}kW" if value >= 999.5 else f"{value:.0f}W"


def load(value: float | None) -> str:
    """A load average with two significant decimals, or `–`."""
    return MISSING if value is None else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def age(seconds: float | None) -> str:
    """A coarse age (`now`, `12s`, `3m`, `2h`, `4d`): coarse so live rows do not churn."""
    if seconds is None:
        return "never"
    if seconds < 10:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def duration(seconds: float | None) -> str:
    """An elapsed time as `H:MM:SS` (or `Dd HH:MM`), or `–`."""
    if seconds is None:
        return MISSING
    total = int(max(0.0, seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}d {hours:02d}:{minutes:02d}" if days else f"{hours}:{minutes:02d}:{secs:02d}"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` cells with an ellipsis, so long names never break a layout."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def host_state(state: str, drained: bool) -> Text:
    """The host state label, marked when drained."""
    label = STATE_LABELS.get(state, clip(state.upper(), 8))
    if drained and state == "up":
        return Text("DRAINED", style="bold magenta")
    return Text(label, style=STATE_STYLES.get(state, "red"))


def gpu_state(state: str, drained: bool) -> Text:
    """The GPU state label (HOT, FAILED, LOST...) or DRAINED."""
    if state != "ok":
        return Text(GPU_STATE_LABELS.get(state, clip(state.upper(), 8)), style="bold red")
    if drained:
        return Text("DRAINED", style="bold magenta")
    return Text("ok", style="green")


def safe_cell(cell: object) -> object:
    """A table cell or line with control characters (terminal escapes) shown as '?', and a
    string as plain Text (a str cell would be read as markup).

    Host names, GPU names, task names and output come from outside; one ESC would let them
    drive the operator's terminal, and one `[/]` would crash the table's rendering. Styles of a
    Text are kept (the replacement is 1:1).
    """
    if isinstance(cell, Text):
        cleaned = safe_text(cell.plain, limit=_UNLIMITED)
        if cleaned == cell.plain:
            return cell
        copy = cell.copy()
        copy.plain = cleaned
        return copy
    if isinstance(cell, str):
        return Text(safe_text(cell, limit=_UNLIMITED))
    return cell
