"""Splitting a byte stream into lines with a bounded buffer: an overlong line is dropped whole."""

from __future__ import annotations

from typing import Protocol

CHUNK_BYTES = 65536


class ByteSource(Protocol):
    """Anything with an async `read(n) -> bytes` that returns b"" at end of stream."""

    async def read(self, n: int = -1) -> bytes: ...


class OverlongLine:
    """Marker returned in place of a line that exceeded the limit; `size` is what was dropped."""

    def __init__(self, size: int) -> None:
        self.size = size


class LineReader:
    """Yields lines (without the newline) from `source`; never buffers more than `limit` bytes.

    A line longer than `limit` is discarded as it arrives and reported as one OverlongLine.
    At end of stream, an unterminated last line is returned in `partial` instead of as a line.
    """

    def __init__(self, source: ByteSource, limit: int) -> None:
        self._source = source
        self._limit = limit
        self._buffer = bytearray()
        self._searched = 0
        self._discarded = 0  # bytes of an overlong line dropped so far
        self.partial = b""

    async def next_line(self) -> bytes | OverlongLine | None:
        """The next line, an OverlongLine, or None at end of stream."""
        while True:
            newline = self._buffer.find(b"\n", self._searched)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._searched = 0
                if self._discarded:
                    size = self._discarded + len(line)
                    self._discarded = 0
                    return OverlongLine(size)
                return line
            self._searched = len(self._buffer)
            if len(self._buffer) > self._limit:
                self._discarded += len(self._buffer)
                self._buffer.clear()
                self._searched = 0
            chunk = await self._source.read(CHUNK_BYTES)
            if not chunk:
                self.partial = bytes(self._buffer)
                self._buffer.clear()
                if self._discarded:
                    size = self._discarded
                    self._discarded = 0
                    return OverlongLine(size)
                return None
            self._buffer += chunk
