"""JSON encoding and validated decoding of wire structs (msgspec, checked in C on decode)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

API_VERSION = "v1"
API_PREFIX = f"/{API_VERSION}"
JSON = "application/json"

T = TypeVar("T")

_encoder = msgspec.json.Encoder(order="deterministic")  # sets sorted: stable output


class WireError(ValueError):
    """A body that is not valid JSON or does not match its struct; the message says where."""


def encode(value: Any) -> bytes:
    """A struct (or plain data) as compact JSON bytes.

    Text that is not valid Unicode (a lone surrogate: a task argument recorded from bytes that
    were not UTF-8, before such arguments were refused) goes as `\\xNN` escapes of its bytes,
    so one old row cannot break a listing for everyone.
    """
    try:
        return _encoder.encode(value)
    except UnicodeEncodeError:
        return _encoder.encode(_valid_text(msgspec.to_builtins(value, order="deterministic")))


def _valid_text(value: Any) -> Any:
    """Plain data with every string made valid Unicode (surrogates as `\\xNN` escapes)."""
    if isinstance(value, str):
        try:
            raw = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate that stands for no byte: `\\udNNN`
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_valid_text(item) for item in value]
    return value


def decode(data: bytes, kind: type[T]) -> T:
    """JSON bytes as a `kind` struct, validated; WireError naming the bad field otherwise."""
    try:
        return msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(str(exc)) from exc
    except RecursionError as exc:  # arrays or objects nested thousands deep: refused, not a bug
        raise WireError("JSON nested too deeply") from exc


def to_wire(value: object, kind: type[T]) -> T:
    """A frozen dataclass (or anything with those attributes) as the `kind` struct."""
    return msgspec.convert(value, kind, from_attributes=True)


def from_wire(value: object, kind: type[T]) -> T:
    """A wire struct as the engine's own dataclass `kind` (fields the wire omits get defaults)."""
    try:
        return msgspec.convert(value, kind, from_attributes=True)
    except msgspec.ValidationError as exc:
        raise WireError(str(exc)) from exc
