"""Splitting a byte stream into lines with a bounded buffer: an overlong line is dropped whole."""

from __future__ import annotations


class OverlongLine:
    """Marker returned in place of a line that exceeded the limit; `size` is what was dropped."""

    def __init__(self, size: int) -> None:
        self.size = size


class LineSplitter:
    """Splits chunks of a stream, as they arrive, into lines (without the newline).

    It never keeps more than `limit` bytes of an unfinished line: a longer one is dropped as it
    arrives and reported as one OverlongLine. At end of stream, `finish()` reports what is left.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._rest = bytearray()  # the start of the unfinished line (at most `limit` bytes)
        self._discarded = 0       # bytes of an overlong unfinished line dropped so far
        self.partial = b""        # after finish(): an unterminated last line

    def feed(self, chunk: bytes) -> list[bytes | OverlongLine]:
        """The lines that `chunk` finishes, in order."""
        newline = chunk.find(b"\n")
        if newline < 0:
            self._keep(chunk)
            return []
        lines = [self._finished(chunk[:newline])]
        *whole, rest = chunk[newline + 1:].split(b"\n")
        lines += [line if len(line) <= self._limit else OverlongLine(len(line)) for line in whole]
        self._keep(rest)
        return lines

    def finish(self) -> OverlongLine | None:
        """End of stream: an overlong unfinished line, if any; an unterminated one goes to
        `partial`."""
        self.partial = bytes(self._rest)
        self._rest.clear()
        if self._discarded:
            size, self._discarded = self._discarded, 0
            return OverlongLine(size)
        return None

    def _finished(self, end: bytes) -> bytes | OverlongLine:
        """The unfinished line, completed by `end`."""
        if self._discarded:
            size, self._discarded = self._discarded + len(end), 0
            return OverlongLine(size)
        line = bytes(self._rest) + end if self._rest else end
        self._rest.clear()
        return line if len(line) <= self._limit else OverlongLine(len(line))

    def _keep(self, data: bytes) -> None:
        """Add `data` to the unfinished line, dropping the line once it passes the limit."""
        if self._discarded:
            self._discarded += len(data)
        elif len(self._rest) + len(data) > self._limit:
            self._discarded = len(self._rest) + len(data)
            self._rest.clear()
        else:
            self._rest += data
