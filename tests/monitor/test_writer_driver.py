"""The monitor's flush runs on the stdlib driver on an SQLite file (no session opened), and
leaves the rows a session-backed flush leaves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from db.engine import Database, open_database
from db.sql import SessionWriter
from fleet.model import HostSpec
from fleet.monitor.batch import EventIn, HostOutcomeIn
from fleet.monitor.writer import SampleWriter
from fleet.reports import GpuReport, HostReport, ProbeReport

SPECS = [HostSpec("node1", "127.0.0.1"), HostSpec("node2", "127.0.0.2")]
READ_AT = 1_700_000_000.0
TABLES = ("hosts", "gpus", "gpu_samples", "host_samples", "events")


def _report(host: str, tick: int) -> ProbeReport:
    gpus = tuple(GpuReport(index=i, uuid=f"GPU-{host}-{i}", name="sim",
                           memory_total_bytes=1 << 34, memory_used_bytes=tick << 20,
                           utilization_gpu_pct=float(tick), temperature_c=40.0 + i)
                 for i in range(2))
    return ProbeReport(schema=1, timestamp=READ_AT + tick, host=HostReport(hostname=host),
                       gpus=gpus)


async def _three_flushes(writer: SampleWriter) -> None:
    """Facts first written, a steady flush, then node2 failing three times (down) with an
    event: the work of every part of the flush."""
    for tick in range(3):
        for spec in SPECS:
            if spec.name == "node2" and tick == 2:
                for _ in range(3):
                    writer.add_host_outcome(HostOutcomeIn(spec.name, "unreachable", "no route",
                                                          3, READ_AT + tick))
                continue
            writer.add_report(spec.name, _report(spec.name, tick))
            writer.add_host_outcome(HostOutcomeIn(spec.name, "up", None, 0, READ_AT + tick))
        writer.add_event(EventIn(READ_AT + tick, "note", "info", f"tick {tick}", "node1", 1))
        await writer.flush()


def _tables(database: Database) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the flush's tables, without the wall-clock columns (the two databases are
    written moments apart, which may straddle a second)."""
    dropped = {"first_seen", "last_seen", "last_probe_at", "created_at", "updated_at"}
    tables: dict[str, list[tuple[object, ...]]] = {}
    with database.reader() as reader:
        for table in TABLES:
            columns = [name for _, name, *_ in reader.rows(f"PRAGMA table_info({table})")
                       if name not in dropped]
            tables[table] = sorted(reader.rows(
                f"SELECT {', '.join(columns)} FROM {table}"), key=repr)
    return tables


async def test_a_flush_on_an_sqlite_file_opens_no_session_and_matches_a_session_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdlib = open_database(f"sqlite:///{tmp_path / 'stdlib.db'}")
    through_session = open_database(f"sqlite:///{tmp_path / 'session.db'}")
    try:
        plain = SampleWriter(stdlib, flush_rows=1000)
        await plain.register_hosts(SPECS)  # registering uses a session; flushes must not
        with monkeypatch.context() as patch:
            patch.setattr(stdlib, "session", _refuse_session)
            await _three_flushes(plain)

        @contextmanager
        def session_writer() -> Iterator[SessionWriter]:
            with through_session.session() as session:
                yield SessionWriter(session)

        monkeypatch.setattr(through_session, "writer", session_writer)
        sessioned = SampleWriter(through_session, flush_rows=1000)
        await sessioned.register_hosts(SPECS)
        await _three_flushes(sessioned)

        assert plain.stats.failed_flushes == sessioned.stats.failed_flushes == 0
        stored = _tables(stdlib)
        assert stored == _tables(through_session)
        assert len(stored["gpu_samples"]) == 5 * 2  # five readings of two GPUs
        with stdlib.reader() as reader:
            states = dict(reader.rows("SELECT name, state FROM hosts"))
        assert states == {"node1": "up", "node2": "down"}
    finally:
        stdlib.close()
        through_session.close()


def _refuse_session() -> None:
    raise AssertionError("a flush on an SQLite file opened a SQLAlchemy session")
