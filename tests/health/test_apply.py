"""Applying health changes to the database and seeding a tracker from it (restart behaviour)."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.events import list_events
from db.gpus import latest_gpus
from db.host_reads import list_hosts
from db.sql import SessionReader
from fleet.health.apply import apply_health_changes, load_health_seeds, record_host_outcome
from fleet.health.rules import HealthChange, HealthTracker
from fleet.reports import GpuReport, HostReport, ProbeReport
from tests.health.conftest import Seeded


def _report(temperature: float, *, lost: bool = False) -> ProbeReport:
    gpus = (GpuReport(0, uuid="GPU-alpha-0", name="Sim H100", temperature_c=temperature),
            GpuReport(1, uuid="GPU-alpha-1", name="Sim H100", lost=lost,
                      error="GPU is lost (15)" if lost else None))
    return ProbeReport(schema=1, timestamp=0, host=HostReport(driver_version="550"), gpus=gpus)


def test_changes_set_states_and_write_events(database: Database, seeded: Seeded) -> None:
    tracker = HealthTracker()
    changes = tracker.observe("alpha", "up", None, _report(91.0, lost=True), now=2000)
    with database.session() as session:
        applied = apply_health_changes(session, changes, now=2000)
    assert [a.change.kind for a in applied] == ["gpu_hot", "gpu_failed"]
    with database.session() as session:
        states = {(g.host, g.idx): g.state for g in latest_gpus(session)}
        events = list_events(session)
    assert states == {("alpha", 0): "hot", ("alpha", 1): "failed", ("beta", 0): "ok"}
    assert [(e.kind, e.severity, e.host, e.gpu_id) for e in events] == [
        ("gpu_hot", "warning", "alpha", seeded.gpu_ids[("alpha", 0)]),
        ("gpu_failed", "error", "alpha", seeded.gpu_ids[("alpha", 1)]),
    ]
    assert events[0].data["temperature_c"] == 91.0
    assert applied[0].event["id"] == events[0].id


def test_host_down_and_up_are_written(database: Database, seeded: Seeded) -> None:
    tracker = HealthTracker()
    beta_id = seeded.host_ids["beta"]
    states = []
    with database.session() as session:
        for now in range(3):
            tracker.observe("beta", "unreachable", "no route to host", None, now=now)
            recorded = record_host_outcome(
                session, beta_id, "beta", "unreachable", "no route to host",
                failures=tracker.failures("beta"), down_after=3, now=3000 + now)
            states.append(recorded.state)
        (beta,) = [h for h in list_hosts(SessionReader(session)) if h.name == "beta"]
    assert states == ["unknown", "unknown", "down"]
    assert (beta.state, beta.state_reason) == ("down", "unreachable: no route to host")
    with database.session() as session:
        tracker.observe("beta", "up", None, _report(40), now=9)
        recorded = record_host_outcome(session, beta_id, "beta", "up", None,
                                       failures=tracker.failures("beta"), down_after=3, now=3100)
        (beta,) = [h for h in list_hosts(SessionReader(session)) if h.name == "beta"]
        events = list_events(session)
    assert beta.state == "up" and beta.state_reason is None
    assert [(e.kind, e.severity) for e in events] == [("host_down", "error"), ("host_up", "info")]
    assert recorded.applied is not None and recorded.applied.event["id"] == events[1].id


def test_host_changes_cannot_bypass_the_host_rule(database: Database, seeded: Seeded) -> None:
    change = HealthChange("beta", None, "host_down", "error", "up", "down", "beta down")
    with database.session() as session, pytest.raises(ValueError, match="record_host_outcome"):
        apply_health_changes(session, [change], now=10)


def test_unknown_host_is_still_an_event(database: Database, seeded: Seeded) -> None:
    change = HealthChange("ghost", 0, "gpu_hot", "warning", "ok", "hot", "ghost GPU 0 hot")
    with database.session() as session:
        (applied,) = apply_health_changes(session, [change], now=10)
        (event,) = list_events(session)
    assert event.host_id is None and event.data["unrecorded_state"] is True
    assert applied.event_id == event.id


def test_restart_seeded_from_database_does_not_refire(database: Database,
                                                      seeded: Seeded) -> None:
    first = HealthTracker()
    with database.session() as session:
        apply_health_changes(session, first.observe("alpha", "up", None,
                                                    _report(91.0, lost=True), now=1), now=1)
        seeds = load_health_seeds(session)
    assert {seed.host for seed in seeds} == {"alpha", "beta"}
    restarted = HealthTracker(seeds=seeds)
    assert restarted.observe("alpha", "up", None, _report(83.0, lost=True), now=2) == []
    kinds = [c.kind for c in restarted.observe("alpha", "up", None, _report(70.0), now=3)]
    assert kinds == ["gpu_cooled", "gpu_recovered"]
