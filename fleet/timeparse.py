"""Parsing of durations ("90s", "2h", "1d12h") and points in time ("1h" ago, ISO 8601, epoch)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from fleet.errors import ConfigError

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


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
        return value
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
    return total


def parse_time(text: str, *, now: float, what: str = "time") -> float:
    """Epoch seconds for "now", a duration ago ("2h"), an ISO 8601 time, or epoch seconds.

    A time without a zone is taken as local time.
    """
    cleaned = text.strip()
    if cleaned.lower() == "now":
        return now
    if re.fullmatch(r"\d{9,}(\.\d+)?", cleaned):
        return float(cleaned)
    if _DURATION_PART.match(cleaned.lower()):
        try:
            return now - parse_duration(cleaned, what=what)
        except ConfigError:
            pass
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ConfigError(
            f"invalid {what} {text!r}: use 'now', a duration ago like 2h, "
            "or an ISO time like 2026-11-30T14:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()


def format_time(epoch: float | None) -> str:
    """Local ISO-like time "2026-11-30 14:03:07" for tables; "-" for None."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


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
