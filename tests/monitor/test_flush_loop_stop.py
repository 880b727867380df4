"""The flush loop ends when cancelled, whenever the cancellation lands (stop() awaits it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from db.engine import Database
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.ssh.options import SshOptions

# Event-loop steps between the loop's start and its cancellation: together they cover every
# point of a pass (waiting for the buffer, the flush, the bookkeeping after it).
STEPS = range(12)


class _Hung(Exception):
    """Raised into a flush loop that ignored its cancellation."""


async def test_a_cancelled_flush_loop_ends_at_any_point_of_its_pass(
    database: Database, fast_settings: Settings, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = SshOptions(known_hosts_files=(), pinned_hosts_file=tmp_path / "pinned",
                         ssh_config_files=())
    monitor = Monitor([], database, options, fast_settings)

    hung: list[int] = []

    async def flush() -> int:  # a quick flush (a real one always waits for its thread once)
        await asyncio.sleep(0)
        if hung:  # a loop that outlived its cancellation: end it, so the test can report it
            raise _Hung
        return 0

    monkeypatch.setattr(monitor.writer, "flush", flush)
    monitor.writer.due.set()  # a full buffer: the wait for it is over at once, every pass
    for steps in STEPS:
        loop_task = asyncio.create_task(monitor._flush_loop())
        for _ in range(steps):
            await asyncio.sleep(0)
        loop_task.cancel()
        done, _ = await asyncio.wait([loop_task], timeout=2)
        if not done:
            hung.append(steps)
            with pytest.raises(_Hung):
                await loop_task
            break
        assert loop_task.cancelled()
    assert hung == [], "the flush loop ignored its cancellation"
