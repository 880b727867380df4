"""Host range patterns: `gpu[01:16]`, `node[a:c]`, `rack[1:2]-gpu[1:8:2]` expanded to names."""

from __future__ import annotations

import itertools
import math
import re

from fleet.errors import ConfigError

# The most names one pattern may expand to: a typo like `[0:99999999]` must fail, not hang.
MAX_RANGE_HOSTS = 10_000

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_NUMBER = re.compile(r"[0-9]*")
_LETTER = re.compile(r"[a-zA-Z]")


def has_host_range(pattern: str) -> bool:
    """Whether `pattern` contains a bracketed range to expand."""
    return "[" in pattern or "]" in pattern


def expand_host_range(pattern: str) -> list[str]:
    """Every name `pattern` stands for, in order; a pattern without brackets is itself.

    `[START:END]` and `[START:END:STEP]` are inclusive. Numbers keep the zero padding of START
    (`gpu[01:16]` gives gpu01..gpu16); single letters count alphabetically (`node[a:c]`). Several
    ranges multiply out left to right. Raises ConfigError (without a path) on a bad pattern.
    """
    match = _BRACKET.search(pattern)
    if match is None:
        if has_host_range(pattern):
            raise ConfigError(f"bad host range {pattern!r}: unbalanced '[' or ']'")
        return [pattern]
    prefix, rest = pattern[: match.start()], pattern[match.end() :]
    if has_host_range(prefix):
        raise ConfigError(f"bad host range {pattern!r}: unbalanced '[' or ']'")
    parts = _range_parts(pattern, match.group(1))
    tails = expand_host_range(rest)
    if len(parts) * len(tails) > MAX_RANGE_HOSTS:
        raise ConfigError(
            f"host range {pattern!r} expands to {len(parts) * len(tails)} names "
            f"(at most {MAX_RANGE_HOSTS})"
        )
    return [f"{prefix}{part}{tail}" for part in parts for tail in tails]


def expand_glob_ranges(pattern: str) -> list[str]:
    """`pattern` (a `--hosts` glob) with each `[START:END(:STEP)]` expanded as in
    expand_host_range, so `gpu[1:3]` means gpu1, gpu2, gpu3 there too.

    A bracket without a colon is left alone: it stays an fnmatch character class (`gpu0[12]`).
    Raises ConfigError (without a path) on a bad range.
    """
    pieces: list[list[str]] = []
    position = 0
    for match in _BRACKET.finditer(pattern):
        if ":" not in match.group(1):
            continue
        pieces.append([pattern[position : match.start()]])
        pieces.append(_range_parts(pattern, match.group(1)))
        position = match.end()
    pieces.append([pattern[position:]])
    count = math.prod(len(piece) for piece in pieces)
    if count > MAX_RANGE_HOSTS:
        raise ConfigError(
            f"host range {pattern!r} expands to {count} names (at most {MAX_RANGE_HOSTS})"
        )
    return ["".join(combination) for combination in itertools.product(*pieces)]


def _range_parts(pattern: str, body: str) -> list[str]:
    """The values one `[START:END(:STEP)]` body stands for."""
    fields = body.split(":")
    if len(fields) not in (2, 3):
        raise ConfigError(
            f"bad host range {pattern!r}: expected [START:END] or [START:END:STEP], got [{body}]"
        )
    start, end = fields[0].strip(), fields[1].strip()
    step = _range_step(pattern, fields[2].strip() if len(fields) == 3 else "1")
    if _NUMBER.fullmatch(start) and _NUMBER.fullmatch(end) and end:
        return _numeric_parts(pattern, start or "0", end, step)
    if _LETTER.fullmatch(start) and _LETTER.fullmatch(end):
        if start.islower() != end.islower() or start > end:
            raise ConfigError(f"bad host range {pattern!r}: [{start}:{end}] is not increasing")
        return [chr(code) for code in range(ord(start), ord(end) + 1, step)]
    raise ConfigError(
        f"bad host range {pattern!r}: [{body}] must be numbers ([01:16]) or single letters ([a:c])"
    )


def _range_step(pattern: str, text: str) -> int:
    """The STEP of a range, a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"bad host range {pattern!r}: step {text!r} must be a positive integer")
    return int(text)


def _numeric_parts(pattern: str, start: str, end: str, step: int) -> list[str]:
    """Numbers from start to end, zero-padded to START's width when START has a leading zero."""
    first, last = int(start), int(end)
    if first > last:
        raise ConfigError(f"bad host range {pattern!r}: [{start}:{end}] is not increasing")
    count = (last - first) // step + 1
    if count > MAX_RANGE_HOSTS:
        raise ConfigError(
            f"host range {pattern!r} expands to {count} names (at most {MAX_RANGE_HOSTS})"
        )
    width = len(start) if len(start) > 1 and start.startswith("0") else 0
    return [str(number).zfill(width) for number in range(first, last + 1, step)]
