"""Values made from files, kept per key and made again only when the files' bytes change."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class FileMemo(Generic[Value]):
    """Per key, the last value made and the file contents it was made from.

    The caller reads the files on every call (cheap next to parsing them), so an edit is seen
    at once whatever the files' timestamps say. One value is made at a time: callers asking
    together (the hosts of a fan-out) wait for the first instead of making it beside it.
    """

    def __init__(self) -> None:
        self._values: dict[Hashable, tuple[object, Value]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, contents: object, make: Callable[[], Value]) -> Value:
        """The value kept for `key` if it was made from `contents`, else `make()`, kept."""
        with self._lock:
            kept = self._values.get(key)
            if kept is not None and kept[0] == contents:
                return kept[1]
            value = make()
            self._values[key] = (contents, value)
            return value
