"""Event listing: time range, severity, host and limit filters, the same on every backend."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.event_queries import find_events
from db.events import add_event
from db.rows import EventView
from db.sql import SessionReader
from tests.db.conftest import SeededFleet


@pytest.fixture
def events(database: Database, seeded: SeededFleet) -> Database:
    """Six events at ts 100..105 (two at 103): alpha's, beta's GPU's and one about no host."""
    with database.session() as session:
        for ts, severity, host, gpu, data in [
                (100, "info", "alpha", None, None),
                (101, "warning", "beta", ("beta", 0), {"temperature_c": 91.5}),
                (102, "error", None, None, {"hook": "page", "attempts": 3}),
                (103, "critical", "alpha", ("alpha", 1), None),
                (103, "info", "beta", None, None),
                (105, "warning", "alpha", None, None)]:
            add_event(session, ts=ts, kind="gpu_hot", severity=severity, message=f"at {ts}",
                      host_id=None if host is None else seeded.host_ids[host],
                      gpu_id=None if gpu is None else seeded.gpu_ids[gpu], data=data)
    return database


def _messages(found: list[EventView]) -> list[str]:
    return [f"{event.message} {event.severity}" for event in found]


def test_every_filter_and_the_newest_limit_oldest_first(events: Database) -> None:
    with events.reader() as reader:
        assert _messages(find_events(reader, since=101, until=103)) == [
            "at 101 warning", "at 102 error"]  # since <= ts < until
        assert _messages(find_events(reader, severity="error")) == [
            "at 102 error", "at 103 critical"]  # that severity and worse
        assert _messages(find_events(reader, host="alpha", limit=2)) == [
            "at 103 critical", "at 105 warning"]
        assert _messages(find_events(reader, limit=3)) == [
            "at 103 critical", "at 103 info", "at 105 warning"]  # equal ts: by id
        assert find_events(reader, host="nosuch") == []
        every = find_events(reader, limit=None)
    assert [event.ts for event in every] == [100, 101, 102, 103, 103, 105]
    beta_gpu = every[1]
    assert (beta_gpu.host, beta_gpu.gpu_idx, beta_gpu.gpu_uuid) == ("beta", 0, "GPU-beta-0")
    assert beta_gpu.data == {"temperature_c": 91.5} and every[0].data == {}
    assert (every[2].host, every[2].gpu_idx, every[2].data) == (None, None,
                                                                {"attempts": 3, "hook": "page"})
    with events.session() as session:  # a write transaction reads the same
        assert find_events(SessionReader(session), limit=None) == every


def test_an_unknown_severity_or_a_non_positive_limit_is_refused(events: Database) -> None:
    with events.reader() as reader:
        with pytest.raises(ValueError, match="unknown severity 'loud'"):
            find_events(reader, severity="loud")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit must be positive"):
            find_events(reader, limit=0)
