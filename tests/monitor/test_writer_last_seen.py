"""A flush leaves every reporting host's last_seen at the flush's own time, whatever else
the flush wrote about that host (a state change, new facts) with the reading's earlier time."""

from __future__ import annotations

import pytest
from sqlalchemy import select

import fleet.monitor.writer as writer_module
from db.engine import Database
from db.models import Host
from fleet.model import HostSpec
from fleet.monitor.batch import HostOutcomeIn
from fleet.monitor.writer import SampleWriter
from fleet.reports import GpuReport, HostReport, ProbeReport

SPEC = HostSpec("node1", "127.0.0.1")
READ_AT = 1_700_000_000.0  # when the reading and its outcome happened
FLUSHED_AT = 1_700_000_042  # when the flush runs: what last_seen must say


def _report(uuid_prefix: str) -> ProbeReport:
    gpus = tuple(GpuReport(index=i, uuid=f"{uuid_prefix}{i}", name="sim") for i in range(2))
    return ProbeReport(schema=1, timestamp=READ_AT, host=HostReport(hostname="node1"), gpus=gpus)


def _stored(database: Database) -> tuple[str, int | None, int | None]:
    with database.session() as session:
        host = session.scalars(select(Host).where(Host.name == SPEC.name)).one()
        return host.state, host.last_seen, host.last_probe_at


async def test_a_host_coming_up_with_new_facts_is_last_seen_at_the_flush(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "now_s", lambda: FLUSHED_AT)
    writer = SampleWriter(database, flush_rows=100)
    await writer.register_hosts([SPEC])
    for outcome in ("unreachable", "unreachable", "unreachable"):
        writer.add_host_outcome(HostOutcomeIn(SPEC.name, outcome, "no route", 3, READ_AT))
    await writer.flush()
    assert _stored(database)[0] == "down"

    writer.add_report(SPEC.name, _report("GPU-a"))  # new facts: its GPUs are written
    writer.add_host_outcome(HostOutcomeIn(SPEC.name, "up", None, 0, READ_AT))
    assert await writer.flush() == 2
    assert _stored(database) == ("up", FLUSHED_AT, FLUSHED_AT)

    writer.add_report(SPEC.name, _report("GPU-b"))  # facts change again, state stays up
    writer.add_host_outcome(HostOutcomeIn(SPEC.name, "up", None, 0, READ_AT))
    assert await writer.flush() == 2
    assert _stored(database) == ("up", FLUSHED_AT, FLUSHED_AT)
