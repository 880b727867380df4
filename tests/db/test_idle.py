"""Idle holdings from stored samples, with a fixed clock, on both backends: a held GPU below both
thresholds for `idle.after` is marked once with an `allocation_idle` event naming the owner;
memory in use or too few readings keep it in use; busy again clears the mark; an idle
reservation is released when `idle.release_reservations_after` is set, tasks never."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from db.allocation_details import allocation_details
from db.engine import Database
from db.models import Allocation, Event, GpuSample
from fleet.placement.idle import IdleOutcome, IdleSettings, mark_idle
from tests.db.conftest import SeededFleet

NOW = 1_800_000_000
GIB = 1 << 30
AFTER = 600.0


def _hold(database: Database, gpu_id: int, owner: str, kind: str = "reservation") -> int:
    with database.session() as session:
        row = Allocation(gpu_id=gpu_id, kind=kind, owner=owner, created_at=NOW - 7200)
        session.add(row)
        session.flush()
        return row.id


def _readings(database: Database, gpu_id: int, util: float, memory: int, *, since: int,
              until: int = NOW) -> None:
    with database.session() as session:
        session.add_all(GpuSample(gpu_id=gpu_id, ts=ts * 1000, utilization_gpu_pct=util,
                                  memory_used_bytes=memory, lost=False)
                        for ts in range(since, until, 10))


def _events(database: Database, kind: str) -> list[Event]:
    with database.session() as session:
        return list(session.scalars(select(Event).where(Event.kind == kind)))


def test_an_idle_reservation_is_marked_once_and_busy_ones_are_not(
        database: Database, seeded: SeededFleet) -> None:
    idle_gpu, busy_gpu, memory_gpu = (seeded.gpu_ids[key] for key in
                                      (("alpha", 0), ("alpha", 1), ("beta", 0)))
    idle = _hold(database, idle_gpu, "ann")
    _hold(database, busy_gpu, "bob", kind="task")
    _hold(database, memory_gpu, "cy")
    _readings(database, idle_gpu, 0.0, 0, since=NOW - 3600)
    _readings(database, busy_gpu, 60.0, 10 * GIB, since=NOW - 3600)
    _readings(database, memory_gpu, 0.0, 40 * GIB, since=NOW - 3600)  # weights loaded, 50 %
    settings = IdleSettings(after=AFTER)
    first = mark_idle(database, settings, NOW)
    assert first.marked == [idle] and first.released == []
    (event,) = _events(database, "allocation_idle")
    assert event.severity == "warning" and "of ann idle" in event.message
    assert event.gpu_id == idle_gpu
    assert mark_idle(database, settings, NOW + 5).marked == []  # one event, not one per pass
    assert len(_events(database, "allocation_idle")) == 1
    with database.reader() as reader:
        marks = {row.id: row.idle_since for row in allocation_details(reader)}
    assert marks[idle] == NOW - int(AFTER) and list(marks.values()).count(None) == 2

    _readings(database, idle_gpu, 90.0, 20 * GIB, since=NOW + 10, until=NOW + 30)
    again = mark_idle(database, settings, NOW + 30)
    assert again.cleared == [idle]  # in use again


def test_few_readings_are_no_proof_of_idleness(database: Database, seeded: SeededFleet) -> None:
    gpu = seeded.gpu_ids[("alpha", 0)]
    _hold(database, gpu, "ann")
    _readings(database, gpu, 0.0, 0, since=NOW - 100)  # only the last 100 s of the 600 s
    assert mark_idle(database, IdleSettings(after=AFTER), NOW).marked == []


def test_idle_reservations_are_released_when_asked_and_tasks_never(
        database: Database, seeded: SeededFleet) -> None:
    reserved_gpu, task_gpu = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    reservation = _hold(database, reserved_gpu, "ann")
    task = _hold(database, task_gpu, "bob", kind="task")
    for gpu in (reserved_gpu, task_gpu):
        _readings(database, gpu, 0.0, 0, since=NOW - 3600)
    # idle since NOW - AFTER once marked: released once idle for 900 s
    settings = IdleSettings(after=AFTER, release_reservations_after=900.0)
    assert mark_idle(database, settings, NOW).released == []  # idle for 600 s so far
    later = mark_idle(database, settings, NOW + 300)
    assert later.released == [reservation]
    (event,) = _events(database, "reservation_released_idle")
    assert "released" in event.message and "of ann" in event.message
    with database.reader() as reader:
        rows = {row.id: row for row in allocation_details(reader, active_only=False)}
    assert rows[reservation].release_reason == "idle" and rows[task].released_at is None


def test_a_pass_with_nothing_old_enough_to_judge_opens_no_write_transaction(
        database: Database, seeded: SeededFleet, monkeypatch: pytest.MonkeyPatch) -> None:
    young_gpu, old_gpu = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    with database.session() as session:
        session.add(Allocation(gpu_id=young_gpu, kind="reservation", owner="ann",
                               created_at=NOW - 60))
    _readings(database, young_gpu, 0.0, 0, since=NOW - 3600)
    real_session = database.session
    sessions: list[str] = []

    def counted() -> Any:
        sessions.append("session")
        return real_session()

    monkeypatch.setattr(database, "session", counted)
    settings = IdleSettings(after=AFTER)
    assert mark_idle(database, settings, NOW) == IdleOutcome()
    assert sessions == []  # the reader found nothing to judge: no write lock taken
    old = _hold(database, old_gpu, "bob")
    _readings(database, old_gpu, 0.0, 0, since=NOW - 3600)
    sessions.clear()
    assert mark_idle(database, settings, NOW).marked == [old]
    assert sessions == ["session"]
