"""Stored unmanaged use: every changed GPU written with one lookup, unknown GPUs left out."""

from __future__ import annotations

from sqlalchemy import event

from db.engine import Database
from db.sql import SessionReader
from db.unmanaged import store_unmanaged, unmanaged_gpus
from fleet.reports import ProcessInfo
from fleet.services.monitor import _stored_form
from tests.db.conftest import SeededFleet

ANN = {"pid": 7, "name": "python", "uid": 1001, "user": "ann"}
BOB = {"pid": 9, "name": "train", "uid": 1002, "user": "bob"}


def test_changed_gpus_are_written_in_two_statements(database: Database,
                                                    seeded: SeededFleet) -> None:
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(database.engine, "before_cursor_execute", count)
    try:
        with database.session() as session:
            written = store_unmanaged(session, {("alpha", 0): [ANN], ("alpha", 1): [ANN, BOB],
                                                ("beta", 0): [], ("gamma", 0): [BOB]})
            session.commit()
    finally:
        event.remove(database.engine, "before_cursor_execute", count)
    assert written == {("alpha", 0), ("alpha", 1), ("beta", 0)}  # gamma: not known yet
    assert len([s for s in statements if s.lstrip().upper().startswith(("SELECT", "UPDATE"))]) == 2
    with database.reader() as reader:
        stored = unmanaged_gpus(reader)
    assert [(gpu.host, gpu.gpu_idx, [p["user"] for p in gpu.processes]) for gpu in stored] == [
        ("alpha", 0, ["ann"]), ("alpha", 1, ["ann", "bob"])]


def test_an_empty_list_clears_what_was_stored(database: Database, seeded: SeededFleet) -> None:
    with database.session() as session:
        store_unmanaged(session, {("beta", 0): [BOB]})
        session.commit()
        assert store_unmanaged(session, {("beta", 0): []}) == {("beta", 0)}
        session.commit()
        assert unmanaged_gpus(SessionReader(session)) == []


def test_a_process_whose_memory_changed_is_the_same_stored_use() -> None:
    before = (ProcessInfo(7, 1 << 30, "python", 1001, "ann"),)
    after = (ProcessInfo(7, 3 << 30, "python", 1001, "ann"),)
    assert _stored_form(before) == _stored_form(after) == (ANN,)
    assert _stored_form(before) != _stored_form((ProcessInfo(8, 1 << 30, "python", 1001, "ann"),))
