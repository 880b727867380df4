"""The streaming probe's SSH session: its lines handled inside the packet's callback, as they come.

A reader task per host would wake, build a future and resume three coroutines for every
reading; here the channel hands each chunk of stdout straight to a line splitter and the host's
line handler, on the event loop, and only the end of the session wakes the host's task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncssh

from fleet.monitor.lines import LineSplitter, OverlongLine

STDERR_TAIL_BYTES = 2000


class ProbeSession(asyncssh.SSHClientSession[bytes]):
    """Feeds stdout's lines to `on_line`; `ended` resolves when the channel closes, with the
    connection's error if any. What `on_line` raises, asyncssh takes as the connection's error:
    it closes the connection, and `ended` raises it."""

    def __init__(self, on_line: Callable[[bytes | OverlongLine], None], limit: int) -> None:
        self._on_line = on_line
        self._lines = LineSplitter(limit)
        self._finished = False
        self.stderr_tail = bytearray()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def partial(self) -> bytes:
        """An unterminated last line of stdout, once the session has ended."""
        return self._lines.partial

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            self.stderr_tail += data
            if len(self.stderr_tail) > STDERR_TAIL_BYTES:
                del self.stderr_tail[: len(self.stderr_tail) - STDERR_TAIL_BYTES]
            return
        if self.ended.done():
            return
        for line in self._lines.feed(data):
            self._on_line(line)

    def eof_received(self) -> bool:
        self._finish_lines()
        return False  # asyncssh answers with its own EOF; the probe's exit status follows

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self._finish_lines()
        self._end(exc)

    def _finish_lines(self) -> None:
        """End of stdout: what is left of an overlong line goes to `on_line` once."""
        if self._finished:
            return
        self._finished = True
        overlong = self._lines.finish()
        if overlong is not None and not self.ended.done():
            self._on_line(overlong)

    def _end(self, exc: Exception | None) -> None:
        if self.ended.done():
            return
        if exc is None:
            self.ended.set_result(None)
        else:
            self.ended.set_exception(exc)


async def open_probe_session(
    conn: asyncssh.SSHClientConnection, command: str,
    on_line: Callable[[bytes | OverlongLine], None], limit: int,
) -> tuple[asyncssh.SSHClientChannel[bytes], ProbeSession]:
    """Start `command` on `conn` with its output going to a ProbeSession."""
    session = ProbeSession(on_line, limit)
    channel, _ = await conn.create_session(lambda: session, command, encoding=None)
    return channel, session
