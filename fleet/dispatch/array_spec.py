"""Job-array specifications: `0-99[:STEP][%MAX]` (also `1,3,5-9`), per-index argument values.

Arguments are never passed through a shell: `{key}` placeholders in the script's arguments are
replaced by the member's values (`{index}` is the array index itself; `{{` and `}}` are
literal braces). A placeholder that a member has no value for is bad input, refused before
anything is recorded.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import ConfigError

MAX_WITHOUT_FORCE = 10_000
MAX_MEMBERS = 1_000_000
MAX_INDEX = 2**31 - 1  # an index is a task's array index (stored, shown, passed as {index})
_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ArraySpec:
    """The indices of an array (ascending, unique) and how many may run at once (None: all)."""

    indices: tuple[int, ...]
    max_running: int | None
    text: str

    @property
    def size(self) -> int:
        """How many members the array has."""
        return len(self.indices)


def parse_array(text: str, *, force: bool = False) -> ArraySpec:
    """`0-15%4`, `0-99:10`, `1,3,5-9%2` as an ArraySpec; ConfigError naming what is wrong."""
    body, percent, limit = text.strip().partition("%")
    max_running: int | None = None
    if percent:
        if not limit.isascii() or not limit.isdigit() or int(limit) < 1:
            raise ConfigError(f"--array {text!r}: %MAX must be a whole number of at least 1")
        max_running = int(limit)  # capped at the array's size below: one waiter per member
    indices: set[int] = set()
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise ConfigError(f"--array {text!r}: {part!r} is not N, A-B or A-B:STEP")
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) is not None else start
        step = int(match.group(3)) if match.group(3) is not None else 1
        if end < start:
            raise ConfigError(f"--array {text!r}: {part!r} ends before it starts")
        if end > MAX_INDEX:
            raise ConfigError(f"--array {text!r}: an index is at most {MAX_INDEX:,}")
        if step < 1:
            raise ConfigError(f"--array {text!r}: STEP must be at least 1")
        if (end - start) // step + 1 + len(indices) > MAX_MEMBERS:
            raise ConfigError(f"--array {text!r}: more than {MAX_MEMBERS:,} members")
        indices.update(range(start, end + 1, step))
    if len(indices) > MAX_WITHOUT_FORCE and not force:
        raise ConfigError(f"--array {text!r}: {len(indices):,} members; more than "
                          f"{MAX_WITHOUT_FORCE:,} needs --force")
    if max_running is not None:
        max_running = min(max_running, len(indices))
    return ArraySpec(tuple(sorted(indices)), max_running, text.strip())


def read_values(path: Path, size: int) -> list[dict[str, str]]:
    """One mapping per member from `path`: a line of `key=value` pairs (shell-style quoting,
    nothing evaluated) per index in order; blank lines and `#` comments are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--array-values {path}: cannot read it: {exc}") from exc
    values: list[dict[str, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=False)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from exc
        row: dict[str, str] = {}
        for word in words:
            key, sep, value = word.partition("=")
            if not sep or not _KEY.fullmatch(key):
                raise ConfigError(f"{path}:{number}: {word!r} is not key=value")
            if key in row:  # which of the two was meant cannot be guessed
                raise ConfigError(f"{path}:{number}: {key!r} is given twice")
            if key == "index":  # {index} is the member's own index
                raise ConfigError(f"{path}:{number}: 'index' is the array index itself; "
                                  "give the value another name")
            row[key] = value
        values.append(row)
    if len(values) != size:
        raise ConfigError(f"--array-values {path}: {len(values)} line(s) of values for an array "
                          f"of {size} members (one line per index)")
    return values


def substitute(args: tuple[str, ...], values: dict[str, str], index: int, *,
               where: str) -> tuple[str, ...]:
    """The arguments with `{key}` replaced (`{index}` is the index); ConfigError naming
    `where` (the values line) for a placeholder without a value."""
    known = {"index": str(index), **values}

    def one(arg: str) -> str:
        def replace(match: re.Match[str]) -> str:
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            key = match.group(1)
            if key not in known:
                raise ConfigError(f"{where}: no value for the placeholder {{{key}}} "
                                  f"(argument {arg!r})")
            return known[key]

        return _PLACEHOLDER.sub(replace, arg)

    return tuple(one(arg) for arg in args)
