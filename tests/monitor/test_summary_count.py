"""The summaries' samples_written add up to what the flushes wrote, each row counted once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from db.engine import Database
from fleet.monitor.config import Settings
from fleet.monitor.monitor import Monitor
from fleet.monitor.summary import MonitorSummary
from fleet.ssh.options import SshOptions
from tests.monitor.conftest import wait_until

ROWS_PER_FLUSH = 4


async def test_a_summary_sent_during_a_flush_counts_no_row_twice(
    database: Database, fast_settings: Settings, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = fast_settings.with_values("monitor", interval=0.1)
    options = SshOptions(known_hosts_files=(), pinned_hosts_file=tmp_path / "pinned",
                         ssh_config_files=())
    ticks: list[MonitorSummary] = []
    monitor = Monitor([], database, options, settings, on_summary=ticks.append)
    finished: list[int] = []

    async def flush() -> int:  # slow flushes back to back: summaries fall inside them
        await asyncio.sleep(0.07)
        finished.append(ROWS_PER_FLUSH)
        return ROWS_PER_FLUSH

    monkeypatch.setattr(monitor.writer, "flush", flush)
    monitor.writer.due.set()  # never cleared: each flush starts as the last one ends
    await monitor.start()
    try:
        await wait_until(lambda: len(ticks) >= 12, 20, "monitor summaries")
    finally:
        await monitor.stop()
    reported = sum(tick.samples_written for tick in ticks) + monitor.summary().samples_written
    assert reported == sum(finished)
