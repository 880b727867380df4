"""A flush the database refuses leaves nothing of its transaction in the writer's caches, and
what the writer keeps for the retry stays bounded and ends as writing at once would have."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import db.samples
import fleet.monitor.writer as writer_module
from db.engine import Database
from db.models import Event, Gpu, GpuSample, Host
from fleet.health.changes import HealthChange
from fleet.health.unmanaged import UnmanagedWatch
from fleet.model import HostSpec
from fleet.monitor.batch import EventIn, HostOutcomeIn
from fleet.monitor.metrics import monitor_metrics
from fleet.monitor.summary import summarize
from fleet.monitor.writer import SampleWriter
from fleet.reports import GpuReport, HostReport, ProbeReport

SPEC = HostSpec("node1", "127.0.0.1")


def _report(uuid_prefix: str = "GPU-a") -> ProbeReport:
    gpus = tuple(GpuReport(index=i, uuid=f"{uuid_prefix}{i}", name="sim") for i in range(2))
    return ProbeReport(schema=1, timestamp=time.time(), host=HostReport(hostname="node1"),
                       gpus=gpus)


def _refuse_first_commit(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """record_sample_rows fails once (after the facts were upserted), as a locked database
    would at the commit; returns the list of calls refused."""
    real = db.samples.record_sample_rows
    refused: list[int] = []

    def record(session: Any, host_rows: Any, gpu_rows: Any) -> int:
        if not refused:
            refused.append(len(gpu_rows))
            session.rollback()
            raise OperationalError("COMMIT", {}, Exception("database is locked"))
        return real(session, host_rows, gpu_rows)

    monkeypatch.setattr(db.samples, "record_sample_rows", record)
    return refused


def _refuse_commits(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """record_sample_rows fails, as a locked database would at the commit, while the returned
    flag's one item is True."""
    real = db.samples.record_sample_rows
    refusing = [True]

    def record(session: Any, host_rows: Any, gpu_rows: Any) -> int:
        if refusing[0]:
            session.rollback()
            raise OperationalError("COMMIT", {}, Exception("database is locked"))
        return real(session, host_rows, gpu_rows)

    monkeypatch.setattr(db.samples, "record_sample_rows", record)
    return refusing


def _gpu_rows(database: Database) -> tuple[dict[int, tuple[int, str | None]], list[int]]:
    """Stored GPUs (id → (index, uuid)) and the gpu_id of every stored sample."""
    with database.session() as session:
        gpus = {gpu.id: (gpu.idx, gpu.uuid) for gpu in session.scalars(select(Gpu))}
        sample_gpu_ids = list(session.scalars(select(GpuSample.gpu_id)))
    return gpus, sample_gpu_ids


async def test_a_refused_flush_caches_no_gpu_ids_and_its_retry_writes_the_gpus(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SampleWriter(database, flush_rows=100)
    await writer.register_hosts([SPEC])
    refused = _refuse_first_commit(monkeypatch)
    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 0
    assert refused == [2] and writer.stats.failed_flushes == 1
    assert writer.stats.facts_writes == 0

    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 4  # the retained reading and the new one
    gpus, sample_gpu_ids = _gpu_rows(database)
    assert sorted(gpus.values()) == [(0, "GPU-a0"), (1, "GPU-a1")]
    assert len(sample_gpu_ids) == 4 and set(sample_gpu_ids) == set(gpus)


async def test_changed_facts_in_a_refused_flush_are_written_again(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SampleWriter(database, flush_rows=100)
    await writer.register_hosts([SPEC])
    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 2
    _refuse_first_commit(monkeypatch)
    writer.add_report(SPEC.name, _report("GPU-b"))  # both GPUs replaced
    assert await writer.flush() == 0
    assert await writer.flush() == 2
    gpus, sample_gpu_ids = _gpu_rows(database)
    assert sorted(gpus.values()) == [(0, "GPU-b0"), (1, "GPU-b1")]
    assert set(sample_gpu_ids) <= set(gpus)
    assert writer.stats.facts_writes == 2


async def test_while_writes_are_refused_the_buffer_never_holds_more_than_the_backlog(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SampleWriter(database, flush_rows=3)  # backlog: 30 rows, 10 readings of 2 GPUs
    await writer.register_hosts([SPEC])
    refusing = _refuse_commits(monkeypatch)
    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 0
    readings = [msgspec.structs.replace(_report(), timestamp=1_000_000.0 + second)
                for second in range(15)]
    for reading in readings:  # between two flushes, as readings arrive during an outage
        writer.add_report(SPEC.name, reading)
        assert writer.buffered_rows <= writer.backlog_rows == 30
    assert writer.stats.dropped_reports == 16 - 10
    refusing[0] = False
    assert await writer.flush() == 20  # the 10 newest readings, 2 GPU rows each
    with database.session() as session:
        stored_ts = set(session.scalars(select(GpuSample.ts)))
    assert stored_ts == {int(reading.timestamp * 1000) for reading in readings[-10:]}
    for _ in range(16):  # writing again: nothing is dropped between flushes
        writer.add_report(SPEC.name, _report())
    assert writer.buffered_rows == 48 and writer.stats.dropped_reports == 6


def _host_record(database: Database, name: str) -> tuple[object, ...]:
    """A host's stored state, reason and probe time, and its events (kind, message, data)."""
    with database.session() as session:
        host = session.scalars(select(Host).where(Host.name == name)).one()
        events = [(event.kind, event.message.replace(name, "HOST"),
                   (event.data_json or "").replace(name, "HOST"))
                  for event in session.scalars(select(Event).where(Event.host_id == host.id)
                                               .order_by(Event.id))]
    return host.state, host.state_reason, host.last_probe_at, events


async def test_a_host_failing_through_an_outage_buffers_a_bounded_few_outcomes_and_ends_the_same(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    down_after, seconds = 3, 60
    steady, outage = HostSpec("steady", "127.0.0.2"), HostSpec("outage", "127.0.0.3")
    writer = SampleWriter(database, flush_rows=100, host_down_after=down_after)
    await writer.register_hosts([steady, outage])

    def failures(host: str) -> list[HostOutcomeIn]:
        return [HostOutcomeIn(host, "unreachable", f"no route to {host} ({second})", second,
                              1_000_000.0 + second) for second in range(1, seconds + 1)]

    for outcome in failures(steady.name):  # written as they come: one flush per interval
        writer.add_host_outcome(outcome)
        await writer.flush()
    refusing = _refuse_commits(monkeypatch)
    for outcome in failures(outage.name):  # the same, while every flush is refused
        writer.add_host_outcome(outcome)
        assert await writer.flush() == 0
        assert writer.buffered_outcomes <= down_after + 1
    refusing[0] = False
    await writer.flush()

    assert writer.buffered_outcomes == 0
    state, reason, probed_at, events = _host_record(database, outage.name)
    assert (state, reason, probed_at) == ("down", f"unreachable: no route to outage ({seconds})",
                                          1_000_000 + seconds)
    assert [kind for kind, _, _ in events] == ["host_down"]
    assert _host_record(database, steady.name) == (
        state, reason.replace("outage", "steady"), probed_at, events)


def _gpu_change(index: int, old: str, new: str, second: int) -> HealthChange:
    return HealthChange(SPEC.name, index, "gpu_hot" if new == "hot" else "gpu_cooled",
                        "warning", old, new, f"GPU {index}: {old} -> {new} #{second}")


async def test_while_writes_are_refused_events_stay_bounded_and_gpu_states_end_right(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "MAX_BACKLOG_EVENTS", 10)
    monkeypatch.setattr(writer_module, "_TRIMMED_EVENTS", 9)
    writer = SampleWriter(database, flush_rows=100)
    await writer.register_hosts([SPEC])
    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 2  # the GPUs exist; from here the database refuses
    refusing = _refuse_commits(monkeypatch)
    writer.add_health_changes([_gpu_change(0, "ok", "hot", 0)], 1.0)  # GPU 0's only change
    writer.add_event(EventIn(ts=1.0, kind="hook_failed", severity="warning", message="first"))
    assert await writer.flush() == 0
    state = "ok"
    for second in range(1, 40):  # GPU 1 flaps, and a hook keeps failing, all outage long
        new = "hot" if state == "ok" else "ok"
        writer.add_health_changes([_gpu_change(1, state, new, second)], float(second))
        state = new
        writer.add_event(EventIn(ts=float(second), kind="hook_failed", severity="warning",
                                 message=f"failure {second}"))
        batch = writer._batch
        assert len(batch.events) <= 10 and len(batch.health) <= 10
    assert writer.stats.dropped_events > 0
    refusing[0] = False
    writer.add_report(SPEC.name, _report())
    assert await writer.flush() == 2
    with database.session() as session:
        states = {gpu.idx: gpu.state for gpu in session.scalars(select(Gpu))}
        messages = list(session.scalars(select(Event.message).order_by(Event.id)))
    assert states == {0: "hot", 1: state}  # GPU 0's old change was kept: it was its newest
    assert "failure 39" in messages and "first" not in messages
    assert f"GPU 1: {'hot' if state == 'ok' else 'ok'} -> {state} #39" in messages
    written_changes = sum(1 for message in messages if message.startswith("GPU "))
    written_failures = sum(1 for message in messages if message.startswith(("failure", "first")))
    assert writer.stats.dropped_events == (40 - written_failures) + (40 - written_changes)
    families = {family.name: family for family in monitor_metrics(writer, UnmanagedWatch())}
    assert list(families["fleet_monitor_events_dropped"].samples) == \
        [({}, float(writer.stats.dropped_events))]
    line = summarize([], 0, buffered=0, failed_flushes=1, readings_dropped=0,
                     events_dropped=writer.stats.dropped_events).line()
    assert line.endswith(f"| {writer.stats.dropped_events} events dropped (buffer full)")
