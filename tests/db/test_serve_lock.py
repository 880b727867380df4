"""The serve lock (needs the suite's PostgreSQL server): it is per database, so two fleet
databases on one server each elect their own leader and name only their own holder; and its
session never idles inside a transaction, so a frozen leader always loses it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from db.serve_lock import ServeLock
from tests.fixtures.database import PgServer

IDLE_TIMEOUT_S = 1.0
TAKEOVER_SLACK_S = 10.0  # bounds the wait only: an idle session ends after IDLE_TIMEOUT_S


@pytest.fixture
def two_engines(pg_server: PgServer) -> Iterator[tuple[Engine, Engine]]:
    """Engines on two fresh databases of the suite's server."""
    names = [pg_server.create_empty_database(f"serve_lock_{side}") for side in ("a", "b")]
    engines = [create_engine(pg_server.cluster.url(name)) for name in names]
    try:
        yield engines[0], engines[1]
    finally:
        for engine in engines:
            engine.dispose()
        for name in names:
            pg_server.drop_database(name)


def test_each_database_has_its_own_leader_and_names_only_its_own_holder(
        two_engines: tuple[Engine, Engine]) -> None:
    first_db, second_db = two_engines
    first = ServeLock(first_db, "fleet serve pid 1 on a")
    rival = ServeLock(first_db, "fleet serve pid 2 on a")
    other = ServeLock(second_db, "fleet serve pid 3 on b")
    try:
        assert first.try_acquire()
        assert ServeLock(second_db, "reader").holder() is None  # not the other database's
        assert not rival.try_acquire()
        assert rival.holder() == "fleet serve pid 1 on a"
        assert other.try_acquire()
        assert other.holder() == "fleet serve pid 3 on b"
        assert first.holder() == "fleet serve pid 1 on a"
    finally:
        for lock in (first, rival, other):
            lock.release()


def _session_state(engine: Engine, label: str) -> str | None:
    with engine.connect() as connection:
        return connection.execute(text(
            "SELECT state FROM pg_stat_activity WHERE application_name = :label"),
            {"label": label}).scalar()


def test_a_leader_stopped_between_two_statements_of_its_lock_session_still_loses_the_lock(
        two_engines: tuple[Engine, Engine]) -> None:
    """A process frozen (SIGSTOP) just after a statement on the lock's session, before any
    commit it would send, must leave that session idle, where the idle timeout ends it: a
    session idle *in a transaction* would hold the lock for as long as the process is frozen."""
    engine, _ = two_engines
    leader = ServeLock(engine, "fleet serve pid 1 on a")
    standby = ServeLock(engine, "fleet serve standby pid 2 on a")
    try:
        assert leader.try_acquire()
        leader.end_when_idle(IDLE_TIMEOUT_S)
        leader.heartbeat()
        connection = leader._session()  # where the process stops: a statement, nothing after it
        connection.execute(text("SELECT 1"))
        assert _session_state(engine, leader.label) == "idle"
        deadline = time.monotonic() + IDLE_TIMEOUT_S + TAKEOVER_SLACK_S
        while not standby.try_acquire():
            assert time.monotonic() < deadline, "the frozen leader's session kept the lock"
            time.sleep(0.1)
    finally:
        for lock in (leader, standby):
            with contextlib.suppress(DBAPIError):
                lock.release()
