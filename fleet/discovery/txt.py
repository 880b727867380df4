"""Defensive decoding of DNS-SD TXT records (RFC 6763) and the GPU summary they announce.

Every byte of a TXT record comes from the network and may be hostile. The wire format is a
sequence of length-prefixed strings `key[=value]`. Rules applied here:
  - keys are ASCII, compared case-insensitively (stored lower-case); a key with bytes outside
    printable ASCII, or an empty key, is dropped with a problem noted;
  - the first occurrence of a key wins, later duplicates are dropped (RFC 6763 §6.4);
  - `key` without '=' is a boolean attribute (value None); `key=` is an empty value;
  - values are bytes: text values are decoded as UTF-8 with replacement and made printable
    with fleet.textsafe.safe_text; numbers must be plain decimals within a sane range;
  - at most MAX_TXT_BYTES of record and MAX_TXT_ENTRIES entries are read; the rest is ignored.
Nothing here raises on bad input: problems are collected as short, printable strings.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.textsafe import safe_text

MAX_TXT_BYTES = 4096
MAX_TXT_ENTRIES = 64
MAX_KEY_CHARS = 32
MAX_TEXT_CHARS = 64
MAX_GPUS = 1024
MAX_MEM_GB = 1_000_000
_NUMBER = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
_PRINTABLE_ASCII_KEY = re.compile(rb"[\x20-\x3c\x3e-\x7e]+")
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def display_text(value: str | bytes, limit: int = MAX_TEXT_CHARS) -> str:
    """Untrusted text as one printable line: UTF-8 with replacement, control and invisible
    format characters (bidi overrides, zero-width) shown as '?', capped at `limit`."""
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
    text = "".join(
        "?" if unicodedata.category(char) in _HIDDEN_CATEGORIES and char != "\t" else char
        for char in text[: limit * 2]
    )
    return safe_text(text, limit=limit).strip()


@dataclass(frozen=True)
class TxtRecord:
    """A decoded TXT record: lower-case key → raw value bytes (None: key without '=')."""

    entries: dict[str, bytes | None]
    problems: tuple[str, ...] = ()

    def text(self, key: str, limit: int = MAX_TEXT_CHARS) -> str | None:
        """The value of `key` as one printable line (None when absent, boolean or empty)."""
        value = self.entries.get(key.lower())
        if not value:
            return None
        return display_text(value, limit) or None


def parse_txt(raw: bytes) -> TxtRecord:
    """Decode TXT wire bytes (length-prefixed strings); never raises."""
    problems: list[str] = []
    if len(raw) > MAX_TXT_BYTES:
        problems.append(f"TXT record of {len(raw)} bytes cut to {MAX_TXT_BYTES}")
        raw = raw[:MAX_TXT_BYTES]
    items: list[bytes] = []
    position = 0
    while position < len(raw):
        length = raw[position]
        start = position + 1
        if start + length > len(raw):
            problems.append("TXT record ends inside a string: last string dropped")
            break
        if length:
            items.append(raw[start : start + length])
        position = start + length
    return _entries_from_items(items, problems)


def parse_properties(properties: Mapping[bytes, bytes | None]) -> TxtRecord:
    """Decode python-zeroconf's `info.properties` mapping (keys already unique)."""
    items = [key if value is None else key + b"=" + value for key, value in properties.items()]
    return _entries_from_items(items, [])


def _entries_from_items(items: list[bytes], problems: list[str]) -> TxtRecord:
    entries: dict[str, bytes | None] = {}
    if len(items) > MAX_TXT_ENTRIES:
        problems.append(f"{len(items)} TXT entries: only the first {MAX_TXT_ENTRIES} read")
        items = items[:MAX_TXT_ENTRIES]
    for item in items:
        raw_key, separator, value = item.partition(b"=")
        if not raw_key:
            if item != b"":
                problems.append("TXT entry with an empty key dropped")
            continue
        if len(raw_key) > MAX_KEY_CHARS or not _PRINTABLE_ASCII_KEY.fullmatch(raw_key):
            shown = display_text(raw_key, limit=MAX_KEY_CHARS)
            problems.append(f"TXT key {shown!r} is not short printable ASCII: dropped")
            continue
        key = raw_key.decode("ascii").lower()
        if key in entries:
            problems.append(f"duplicate TXT key {key!r}: later value ignored")
            continue
        entries[key] = value if separator else None
    return TxtRecord(entries, tuple(problems))


@dataclass(frozen=True)
class TxtSummary:
    """What an announcement says about a host, every field validated (None: absent or invalid)."""

    gpu_count: int | None = None
    gpu_model: str | None = None
    session: str | None = None
    ssh_port: int | None = None
    mem_gb: float | None = None
    hostname: str | None = None
    node_id: str | None = None
    version: str | None = None
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (stored in the candidates table's txt_json)."""
        return {
            "gpu_count": self.gpu_count,
            "gpu_model": self.gpu_model,
            "session": self.session,
            "ssh_port": self.ssh_port,
            "mem_gb": self.mem_gb,
            "hostname": self.hostname,
            "node_id": self.node_id,
            "version": self.version,
            "problems": list(self.problems),
        }


def parse_number(
    record: TxtRecord, key: str, low: float, high: float, problems: list[str], *,
    integer: bool = True,
) -> float | None:
    """The value of `key` as a number within [low, high]; absurd values noted and dropped."""
    text = record.entries.get(key)
    if text is None:
        return None
    decoded = text.decode("ascii", errors="replace").strip()
    if not _NUMBER.fullmatch(decoded) or (integer and "." in decoded):
        shown = display_text(decoded, limit=24)
        problems.append(f"{key}={shown!r} is not a {'whole ' if integer else ''}number: ignored")
        return None
    number = float(decoded)
    if not low <= number <= high:
        problems.append(f"{key}={decoded} is outside {low:g}..{high:g}: ignored")
        return None
    return number


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def summarize(service_type: str, record: TxtRecord) -> TxtSummary:
    """The validated summary of `record` for a service type (`_fleet._tcp`, `_gpu-sd._tcp`...)."""
    problems = list(record.problems)
    kind = service_type.lower().removesuffix(".").removesuffix(".local")
    gpu_count: int | None = None
    gpu_model: str | None = None
    if kind == "_gpu-sd._tcp" or kind == "_net-sd._tcp":
        gpu_count = _int(parse_number(record, "gpu count", 0, MAX_GPUS, problems))
        gpu_model = record.text("gpu0 type") or record.text("gpu0 device")
    elif kind == "_hwgpus._tcp":
        gpu_count, gpu_model = _hwgpus_gpu(record, problems)
    if gpu_count is None:
        gpu_count = _int(parse_number(record, "gpus", 0, MAX_GPUS, problems))
    gpu_model = gpu_model or record.text("gpu_model")
    return TxtSummary(
        gpu_count=gpu_count,
        gpu_model=gpu_model,
        session=record.text("session"),
        ssh_port=_int(parse_number(record, "ssh_port", 1, 65535, problems)),
        mem_gb=parse_number(record, "mem_gb", 0, MAX_MEM_GB, problems, integer=False),
        hostname=record.text("hostname"),
        node_id=record.text("nodeid"),
        version=record.text("v", limit=8),
        problems=tuple(problems),
    )


def _hwgpus_gpu(record: TxtRecord, problems: list[str]) -> tuple[int | None, str | None]:
    """`_hwgpus._tcp`'s `gpu` property: a count (`gpu=4`) or a list of models (`gpu=A100,A100`)."""
    raw = record.entries.get("gpu")
    if raw is None:
        return None, None
    text = raw.decode("utf-8", errors="replace").strip()
    if text[:1].isdigit() or text[:1] == "-":
        return _int(parse_number(record, "gpu", 0, MAX_GPUS, problems)), None
    models = [part.strip() for part in re.split(r"[,;]", text) if part.strip()]
    if not models:
        return 0, None
    if len(models) > MAX_GPUS:
        problems.append(f"gpu lists {len(models)} GPUs, more than {MAX_GPUS}: count ignored")
        return None, display_text(models[0])
    return len(models), display_text(models[0])


def build_txt(properties: Mapping[str, str | int | float | None]) -> dict[str, str]:
    """TXT properties for an announcement: None values dropped, every value a short string."""
    built: dict[str, str] = {}
    for key, value in properties.items():
        if value is None:
            continue
        text = f"{value:g}" if isinstance(value, float) else str(value)
        built[key] = display_text(text, limit=200)
    return built
