"""Durations and times are finite and within what fleet can store and show; NaN, infinity and
year-10000 values are bad input with a message, not a traceback later."""

from __future__ import annotations

import pytest

from fleet.errors import ConfigError
from fleet.timeparse import (
    MAX_DURATION_S,
    MAX_EPOCH_S,
    format_time,
    parse_duration,
    parse_range,
    parse_time,
)

NOW = 1_796_000_000.0


@pytest.mark.parametrize(("text", "message"), [
    ("nan", "a duration is a finite number of seconds"),
    ("inf", "a duration is a finite number of seconds"),
    ("-inf", "must not be negative"),
    ("1e400", "a duration is a finite number of seconds"),
    ("3000000d", "longer than a century"),
    ("99999999999999999999999d", "longer than a century"),
    (f"{MAX_DURATION_S + 1:.0f}", "longer than a century"),
])
def test_a_duration_that_is_not_finite_or_too_long_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_duration(text, what="--for")


def test_durations_up_to_a_century_still_parse() -> None:
    assert parse_duration("36500d") == 36500 * 86400
    assert parse_duration("1d12h") == 129600
    assert parse_duration("0") == 0


@pytest.mark.parametrize("text", [
    "9999999999999999d", "0001-01-01", "99999999999999999999", "1969-01-01T00:00+00:00",
    "nan", "inf",
])
def test_a_time_outside_the_epoch_to_year_9999_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        parse_time(text, now=NOW, what="--since")


def test_times_inside_the_range_still_parse() -> None:
    assert parse_time("9999-12-31T23:59:59+00:00", now=NOW) == MAX_EPOCH_S
    assert parse_time("2h30m", now=NOW) == NOW - 9000
    assert parse_time("1700000000", now=NOW) == 1_700_000_000
    assert parse_range("1h", "now", "5m", now=NOW) == (NOW - 3600, NOW, 300)


def test_a_time_recorded_out_of_range_is_shown_not_raised() -> None:
    assert format_time(8_640_000_001_796_594_688) == "8.64e+18 (out of range)"
