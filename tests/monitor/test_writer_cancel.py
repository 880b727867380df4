"""A flush whose caller is cancelled mid-write (Monitor.stop cancels its flush loop) returns
only once its transaction has ended, and the next flush starts after it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import func, select

import db.samples
from db.engine import Database
from db.models import GpuSample
from fleet.model import HostSpec
from fleet.monitor.writer import SampleWriter
from fleet.reports import GpuReport, HostReport, ProbeReport

SPEC = HostSpec("node1", "127.0.0.1")


def _report() -> ProbeReport:
    gpus = tuple(GpuReport(index=i, uuid=f"GPU-c{i}", name="sim") for i in range(2))
    return ProbeReport(schema=1, timestamp=time.time(), host=HostReport(hostname="node1"),
                       gpus=gpus)


def _stored_samples(database: Database) -> int:
    with database.session() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)) or 0)


async def test_a_cancelled_flush_ends_after_its_commit_and_the_next_flush_follows_it(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SampleWriter(database, flush_rows=100)
    await writer.register_hosts([SPEC])
    real = db.samples.record_sample_rows
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def record(session: Any, host_rows: Any, gpu_rows: Any) -> int:
        calls.append(len(gpu_rows))
        if len(calls) == 1:
            entered.set()
            assert release.wait(10), "the test never released the first write"
        return real(session, host_rows, gpu_rows)

    monkeypatch.setattr(db.samples, "record_sample_rows", record)
    writer.add_report(SPEC.name, _report())
    first = asyncio.create_task(writer.flush())
    assert await asyncio.to_thread(entered.wait, 10)
    first.cancel()
    writer.add_report(SPEC.name, _report())
    second = asyncio.create_task(writer.flush())
    await asyncio.sleep(0.3)
    assert not first.done(), "the cancelled flush returned while its transaction was open"
    assert calls == [2], "the next flush wrote while the first transaction was open"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert _stored_samples(database) == 2
    assert await second == 2
    assert calls == [2, 2] and _stored_samples(database) == 4
    assert writer.stats.flushes == 2 and writer.stats.failed_flushes == 0
