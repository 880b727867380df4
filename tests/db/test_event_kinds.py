"""Event-kind filters: one case rule (case-insensitive) on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.event_queries import find_events
from db.events import add_event
from tests.db.conftest import SeededFleet

KINDS = ("gpu_hot", "gpu_lost", "gpuxhot", "host_down", "ecc_100%")


@pytest.fixture
def events(database: Database, seeded: SeededFleet) -> Database:
    with database.session() as session:
        for ts, kind in enumerate(KINDS):
            add_event(session, ts=ts, kind=kind, severity="info", message=kind,
                      host_id=seeded.host_ids["alpha"])
    return database


@pytest.mark.parametrize(("pattern", "expected"), [
    ("GPU_*", ["gpu_hot", "gpu_lost"]),  # `_` is literal, not LIKE's any-character
    ("gpu_*", ["gpu_hot", "gpu_lost"]),
    ("Gpu?Hot", ["gpu_hot", "gpuxhot"]),
    ("HOST_DOWN", ["host_down"]),
    ("ecc_100%", ["ecc_100%"]),
    ("ecc_1*", ["ecc_100%"]),
    ("*%", ["ecc_100%"]),  # `%` is literal too
    ("gpu", []),
])
def test_kind_globs_and_names_match_the_same_on_every_backend(
    events: Database, pattern: str, expected: list[str]
) -> None:
    with events.reader() as reader:
        found = [event.kind for event in find_events(reader, kind=pattern)]
    assert found == expected
