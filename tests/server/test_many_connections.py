"""`fleet serve` keeps its memory and file descriptors flat across 10,000 short connections."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.server.conftest import ServeLabFactory

CONNECTIONS = 10_000
WARM_UP = 1_000
AT_ONCE = 16
# Allowance for allocator noise; a leak of one small object per connection is over it.
RSS_GROWTH_LIMIT = 24 << 20
REQUEST = b"GET /v1/whoami HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n\r\n"


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _hammer(socket_path: Path, count: int) -> None:
    """`count` connections, AT_ONCE at a time, each one request answered 200 and closed."""
    remaining = iter(range(count))

    async def worker() -> None:
        for _ in remaining:
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
            try:
                writer.write(REQUEST)
                reply = await asyncio.wait_for(reader.read(), 10)
            finally:
                writer.close()
                await writer.wait_closed()
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]

    await asyncio.gather(*(worker() for _ in range(AT_ONCE)))


@pytest.mark.slow
async def test_ten_thousand_short_connections_leave_memory_and_fds_flat(
        serve_lab: ServeLabFactory) -> None:
    lab = await serve_lab(1)
    server = await lab.serve()
    await _hammer(server.socket_path, WARM_UP)
    rss, fds = _rss_bytes(server.pid), _open_fds(server.pid)
    await _hammer(server.socket_path, CONNECTIONS)
    deadline = time.monotonic() + 10  # until the last closes reach the server
    while _open_fds(server.pid) > fds + 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    grown = _rss_bytes(server.pid) - rss
    assert _open_fds(server.pid) <= fds + 2, (fds, _open_fds(server.pid))
    assert grown < RSS_GROWTH_LIMIT, f"RSS grew {grown >> 20} MiB over {CONNECTIONS} connections"
    assert server.process.returncode is None
