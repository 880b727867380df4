"""known_hosts files: their lines as entries, host-field matching, and a per-process index.

A fleet connects to many hosts, and every connection looks its host up in the same files.
Parsing a file for each connection would make a fan-out cost files × hosts: 38 ms of CPU per
host with a 2,000-line file. `matching_entries` parses a file once per content (it reads the bytes
each time, so an edited file is seen at once, whatever its timestamps say) and answers plain
names from a dict; only wildcard, negated and hashed fields are tried one by one, each compiled
once.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from fleet.ssh.file_memo import FileMemo

_WILDCARDS = frozenset("*?!")


@dataclass(frozen=True)
class KnownHostsEntry:
    """One host-key line of a known_hosts file; `key_blob` is None when the line is malformed."""

    path: Path
    line: int
    marker: str | None  # None, "revoked" or "cert-authority"
    hosts: str
    key_type: str
    key_blob: bytes | None

    @property
    def where(self) -> str:
        """FILE:LINE of this entry."""
        return f"{self.path}:{self.line}"


def _blob_type(blob: bytes) -> str | None:
    """The key type named inside a public key blob, or None if the blob is not well formed."""
    if len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length == 0 or 4 + length > len(blob):
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """An OpenSSH wildcard (`*`, `?`; everything else literal) as an anchored regex."""
    parts = (".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _hashed_name(field: str) -> tuple[bytes, bytes] | None:
    """(salt, HMAC-SHA1) of a hashed host field `|1|salt|hash`; None if it is not well formed."""
    parts = field.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return None
    try:
        return base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return None


class HostPattern:
    """A known_hosts host field, compiled once: one hashed name, or comma-separated patterns
    (`*`, `?` wildcards, `!` negation; matched without regard to case)."""

    __slots__ = ("hashed", "literals", "negative", "positive")

    def __init__(self, hosts: str) -> None:
        self.hashed: tuple[bytes, bytes] | None = None
        # Every name the field lists when all of them are plain ASCII names, else None.
        self.literals: frozenset[str] | None = None
        self.positive: list[re.Pattern[str]] = []
        self.negative: list[re.Pattern[str]] = []
        if hosts.startswith("|"):
            self.hashed = _hashed_name(hosts)
            return
        parts = [part for part in hosts.split(",") if part]
        if all(part.isascii() and not _WILDCARDS.intersection(part) for part in parts):
            self.literals = frozenset(part.lower() for part in parts)
        for part in parts:
            if part.startswith("!"):
                if part[1:]:
                    self.negative.append(_pattern_regex(part[1:]))
            else:
                self.positive.append(_pattern_regex(part))

    def matches(self, name: str) -> bool:
        """Whether this field stands for `name` (a host field: `addr` or `[addr]:port`)."""
        if self.hashed is not None:
            salt, expected = self.hashed
            actual = hmac.digest(salt, name.lower().encode("utf-8"), "sha1")
            return hmac.compare_digest(actual, expected)
        if self.literals is not None:
            return name.lower() in self.literals if name.isascii() else self._by_regex(name)
        return self._by_regex(name)

    def _by_regex(self, name: str) -> bool:
        if any(pattern.fullmatch(name) for pattern in self.negative):
            return False
        return any(pattern.fullmatch(name) for pattern in self.positive)


def hosts_match(hosts: str, name: str) -> bool:
    """Whether a known_hosts host field (patterns or one hashed name) matches `name`."""
    return HostPattern(hosts).matches(name)


def _parse_line(path: Path, number: int, text: str) -> KnownHostsEntry | None:
    """One known_hosts line as an entry; None for blank lines and comments."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    fields = stripped.split()
    marker: str | None = None
    if fields[0].startswith("@"):
        marker = fields[0][1:]
        fields = fields[1:]
    hosts = fields[0] if fields else ""
    if len(fields) < 3:
        return KnownHostsEntry(path, number, marker, hosts, "", None)
    key_type = fields[1]
    try:
        blob: bytes | None = base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        blob = None
    if blob is not None and _blob_type(blob) != key_type:
        blob = None
    return KnownHostsEntry(path, number, marker, hosts, key_type, blob)


def _entries_of(path: Path, text: str) -> list[KnownHostsEntry]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = _parse_line(path, number, line)
        if entry is not None:
            entries.append(entry)
    return entries


def read_known_hosts(path: Path) -> list[KnownHostsEntry]:
    """Every host-key line of a known_hosts file; a missing file has none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _entries_of(path, text)


class KnownHostsIndex:
    """One file's entries, looked up by host name: plain names from a dict, the rest one by one."""

    def __init__(self, entries: list[KnownHostsEntry]) -> None:
        self.entries = entries
        self.patterns = [HostPattern(entry.hosts) for entry in entries]
        self.by_name: dict[str, list[int]] = {}
        self.others: list[int] = []
        for position, pattern in enumerate(self.patterns):
            if pattern.literals is None:
                self.others.append(position)
            for literal in pattern.literals or ():
                self.by_name.setdefault(literal, []).append(position)

    def matching(self, name: str) -> list[KnownHostsEntry]:
        """The entries whose host field matches `name`, in file order."""
        if not name.isascii():  # case rules beyond ASCII: let every field's regex decide
            return [
                entry
                for entry, pattern in zip(self.entries, self.patterns, strict=True)
                if pattern.matches(name)
            ]
        positions = list(self.by_name.get(name.lower(), ()))
        positions.extend(i for i in self.others if self.patterns[i].matches(name))
        return [self.entries[position] for position in sorted(positions)]


_parsed: FileMemo[KnownHostsIndex] = FileMemo()  # by file path


def matching_entries(path: Path, name: str) -> list[KnownHostsEntry]:
    """The entries of the known_hosts file at `path` that match host field `name`, in file order.

    A missing file has none; other read errors (OSError) propagate. The file is read on every
    call and parsed again only when its bytes changed.
    """
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    index = _parsed.get(path, data, lambda: KnownHostsIndex(
        _entries_of(path, data.decode("utf-8", errors="replace"))))
    return index.matching(name)
