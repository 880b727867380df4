"""Parsing of durations ("90s", "2h", "1d12h") and points in time ("1h" ago, ISO 8601, epoch)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from fleet.errors import ConfigError

# No interval, timeout, window or hold fleet takes is longer than a century; a longer one is a
# typo, and past it times and SQLite's integers overflow.
MAX_DURATION_S = 100 * 366 * 86400.0
# Points in time fleet takes: from the epoch to the last second datetime can show (year 9999).
MAX_EPOCH_S = 253_402_300_799.0
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in a duration like "90", "90s", "5m", "1h30m", "2d"; ConfigError when malformed."""
    cleaned = text.strip().lower()
    if not cleaned:
        raise ConfigError(f"empty {what}")
    try:
        value = float(cleaned)
    except ValueError:
        pass
    else:
        if value < 0:
            raise ConfigError(f"{what} must not be negative: {text!r}")
        return _bounded_duration(value, text, what)
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(cleaned):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(cleaned) or position == 0:
        raise ConfigError(
            f"invalid {what} {text!r}: use a number with a unit, e.g. 90s, 15m, 2h, 1d12h"
        )
    return _bounded_duration(total, text, what)


def _bounded_duration(seconds: float, text: str, what: str) -> float:
    if not math.isfinite(seconds):  # "nan", "inf": float() takes them
        raise ConfigError(f"invalid {what} {text!r}: a duration is a finite number of seconds")
    if seconds > MAX_DURATION_S:
        raise ConfigError(f"{what} {text!r} is longer than a century")
    return seconds


def parse_time(text: str, *, now: float, what: str = "time") -> float:
    """Epoch seconds for "now", a duration ago ("2h"), an ISO 8601 time, or epoch seconds.

    A time without a zone is taken as local time.
    """
    cleaned = text.strip()
    if cleaned.lower() == "now":
        return now
    if re.fullmatch(r"\d{9,}(\.\d+)?", cleaned):
        return _bounded_time(float(cleaned), text, what)
    if _DURATION.fullmatch(cleaned.lower()):
        return _bounded_time(now - parse_duration(cleaned, what=what), text, what)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ConfigError(
            f"invalid {what} {text!r}: use 'now', a duration ago like 2h, "
            "or an ISO time like 2026-11-30T14:00"
        ) from None
    try:
        seconds = (moment if moment.tzinfo else moment.astimezone()).timestamp()
    except (OverflowError, ValueError, OSError):  # a year the time functions cannot take
        seconds = -1.0
    return _bounded_time(seconds, text, what)


def _bounded_time(seconds: float, text: str, what: str) -> float:
    if not 0 <= seconds <= MAX_EPOCH_S:
        raise ConfigError(f"{what} {text!r} is outside 1970-01-01 .. 9999-12-31")
    return seconds


def format_time(epoch: float | None) -> str:
    """Local ISO-like time "2026-11-30 14:03:07" for tables; "-" for None."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch, tz=UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):  # recorded before fleet bounded its inputs
        return f"{epoch:g} (out of range)"


def parse_range(since: str, until: str, bucket: str | None, *, now: float
                ) -> tuple[float, float, int | None]:
    """(since, until, bucket seconds) from `--since/--until/--bucket` texts, checked together."""
    since_epoch = parse_time(since, now=now, what="--since")
    until_epoch = parse_time(until, now=now, what="--until")
    if until_epoch < since_epoch:
        raise ConfigError(f"--until ({until}) is before --since ({since})")
    bucket_s = None
    if bucket is not None:
        bucket_s = int(parse_duration(bucket, what="--bucket"))
        if bucket_s < 1:
            raise ConfigError("--bucket must be at least 1s")
    return since_epoch, until_epoch, bucket_s
