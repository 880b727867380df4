"""Plain-SQL writes: the stdlib SQLite writer stores exactly what a session stores.

`fleet status` records through `Database.writer()`: on a writable SQLite file that is the stdlib
driver (db.sql.SqliteWriter, no SQLAlchemy), elsewhere a SQLAlchemy session. The same rounds of
probe outcomes (new hosts, a move, a rename over a taken name, facts changing, a GPU lost, a
host down, readings too large for their column) are recorded both ways and every table written
must come out the same.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect

from db.engine import open_database
from db.errors import DatabaseError
from db.events import add_event
from db.samples import _NULLABLE_INTS, integer_bounds
from db.sql import SessionWriter, SqliteWriter, SqlWriter
from fleet.fanout import HostStatus
from fleet.model import HostSpec
from fleet.probe.parse import report_from_dict
from fleet.recorder import record_statuses

T0 = 1_700_000_000
TABLES = ("hosts", "gpus", "events", "host_samples", "gpu_samples")


def _up(name: str, address: str, gpus: list[dict[str, Any]], ts: int,
        host: dict[str, Any] | None = None) -> HostStatus:
    line = {"schema": 1, "ts": float(ts), "host": host or {"driver_version": "550.54"},
            "gpus": gpus}
    return HostStatus(HostSpec(name, address), "up", None, report_from_dict(line, name), 0.1,
                      float(ts))


def _gpu(index: int, uuid: str, **readings: Any) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "name": "Sim H100", "utilization_gpu_pct": 50.0,
            **readings}


def _rounds() -> list[list[HostStatus]]:
    """Three `fleet status` outcomes in a row, each touching another path of the record step."""
    first = [
        _up("alpha", "10.9.0.1", [_gpu(0, "GPU-a0"), _gpu(1, "GPU-a1")], T0),
        _up("beta", "10.9.0.2", [_gpu(0, "GPU-b0", clock_sm_mhz=2**40)], T0,
            host={"cpu_count": 2**40, "net_rx_bytes": 2**70}),
        HostStatus(HostSpec("gamma", "10.9.0.3"), "unreachable", "connection refused", None,
                   0.1, float(T0)),
    ]
    second = [
        # alpha's driver changed, its GPU 1 was swapped (new UUID) and GPU 0 is lost.
        _up("alpha", "10.9.0.1",
            [{"index": 0, "uuid": "GPU-a0", "lost": True, "error": "fell off the bus"},
             _gpu(1, "GPU-a1-new")], T0 + 10, host={"driver_version": "555.42"}),
        # beta's address now answers as "delta" (matched by address: renamed).
        _up("delta", "10.9.0.2", [_gpu(0, "GPU-b0")], T0 + 10),
        # gamma moved to a new address (matched by name) and is still down.
        HostStatus(HostSpec("gamma", "10.9.0.33"), "probe_error", "python3 not found", None, 0.1,
                   float(T0 + 10)),
    ]
    third = [
        # A host named "alpha" at delta's address: delta's row takes the name, and the stored
        # alpha (another address) is renamed "alpha#ID".
        _up("alpha", "10.9.0.2", [_gpu(0, "GPU-b0"), _gpu(1, "GPU-b1")], T0 + 20),
        _up("gamma", "10.9.0.33", [], T0 + 20),
    ]
    return [first, second, third]


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    connection = sqlite3.connect(path)
    try:
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
                for table in TABLES}
    finally:
        connection.close()


def test_status_rounds_recorded_through_the_stdlib_writer_equal_the_sessions(
        tmp_path: Path) -> None:
    through_stdlib, through_session = tmp_path / "stdlib.db", tmp_path / "session.db"
    for path in (through_stdlib, through_session):
        open_database(str(path)).close()  # created and migrated
    stdlib_db, session_db = open_database(str(through_stdlib)), open_database(str(through_session))
    try:
        for moment, statuses in enumerate(_rounds()):
            with stdlib_db.writer() as writer:
                assert isinstance(writer, SqliteWriter)
                record_statuses(writer, statuses, now=T0 + 10 * moment)
            with session_db.session() as session:
                record_statuses(session, statuses, now=T0 + 10 * moment)
    finally:
        stdlib_db.close()
        session_db.close()
    stored, expected = _dump(through_stdlib), _dump(through_session)
    assert stored == expected
    names = [row[1] for row in stored["hosts"]]
    assert names == [f"alpha#{stored['hosts'][0][0]}", "alpha", "gamma"]
    connection = sqlite3.connect(through_stdlib)
    kinds = [kind for (kind,) in connection.execute("SELECT kind FROM events")]
    connection.close()
    assert {"host_down", "gpu_lost", "gpu_changed", "driver_version_changed",
            "host_up"} <= set(kinds), kinds
    assert any(value is None for row in stored["gpu_samples"] for value in row)  # fitted


def test_a_failed_block_writes_nothing_and_the_next_one_writes(tmp_path: Path) -> None:
    database = open_database(str(tmp_path / "fleet.db"))
    try:
        with pytest.raises(RuntimeError), database.writer() as writer:
            add_event(writer, ts=T0, kind="note", severity="info", message="kept?")
            raise RuntimeError("the block failed")
        with pytest.raises(DatabaseError, match=r"database error on .*fleet\.db: no such table"), \
                database.writer() as writer:
            writer.execute("INSERT INTO no_such_table VALUES (1)")
        with database.writer() as writer:
            event_id = add_event(writer, ts=T0, kind="note", severity="info", message="kept")
        with database.reader() as reader:
            assert reader.rows("SELECT id, message FROM events") == [(event_id, "kept")]
    finally:
        database.close()


def test_a_commit_inside_the_block_starts_a_new_transaction(tmp_path: Path) -> None:
    """record_sample_rows commits; what the block writes after that is still one transaction,
    rolled back with the block."""
    database = open_database(str(tmp_path / "fleet.db"))
    try:
        with pytest.raises(RuntimeError), database.writer() as writer:
            add_event(writer, ts=T0, kind="note", severity="info", message="committed")
            writer.commit()
            add_event(writer, ts=T0, kind="note", severity="info", message="rolled back")
            raise RuntimeError("after the commit")
        with database.reader() as reader:
            assert reader.scalars("SELECT message FROM events") == ["committed"]
    finally:
        database.close()


def test_a_fenced_or_server_database_writes_through_a_session(tmp_path: Path) -> None:
    database = open_database(str(tmp_path / "fleet.db"))
    fenced: list[object] = []
    database.fence = fenced.append
    try:
        with database.writer() as writer:
            assert isinstance(writer, SessionWriter)
            add_event(writer, ts=T0, kind="note", severity="info", message="fenced")
        assert len(fenced) == 1
    finally:
        database.close()


def test_the_stdlib_samples_path_bounds_the_columns_the_models_bound() -> None:
    dialect = sqlite_dialect.dialect()
    for table_name, positions in _NULLABLE_INTS.items():
        assert positions == tuple(position for position, _, _ in
                                  integer_bounds(dialect, table_name))


def test_every_writer_is_a_reader_that_commits() -> None:
    for kind in (SqliteWriter, SessionWriter):
        assert issubclass(kind, SqlWriter)


def test_the_stdlib_writer_needs_no_returning_clause(tmp_path: Path) -> None:
    """Inserts read the cursor's lastrowid, so an SQLite older than 3.35 (no RETURNING) records
    too; what runs is traced."""
    database = open_database(str(tmp_path / "fleet.db"))
    statements: list[str] = []
    try:
        with database.writer() as writer:
            assert isinstance(writer, SqliteWriter)
            writer.connection.set_trace_callback(statements.append)
            for moment, statuses in enumerate(_rounds()):
                record_statuses(writer, statuses, now=T0 + 10 * moment)
            writer.connection.set_trace_callback(None)
            with pytest.raises(ValueError, match="must end with RETURNING id"):
                writer.insert("INSERT INTO events (ts) VALUES (1)")
    finally:
        database.close()
    inserts = [sql for sql in statements if sql.startswith("INSERT INTO hosts")]
    assert len(inserts) == 3  # alpha, beta, gamma
    assert not [sql for sql in statements if "RETURNING" in sql]


def test_a_bool_is_bound_by_a_registered_adapter_as_the_integer_sqlite_stores(
        tmp_path: Path) -> None:
    """The monitor binds a bool per GPU sample (`lost`): unregistered, each one costs the driver
    a failed __conform__ lookup; registered, it is stored exactly as before (integer 0 or 1)."""
    import db.sqlite  # noqa: F401  (registers the adapter)

    assert sqlite3.adapters.get((bool, sqlite3.PrepareProtocol)) is int
    with contextlib.closing(sqlite3.connect(tmp_path / "bools.db")) as connection:
        connection.execute("CREATE TABLE t (lost BOOLEAN)")
        connection.executemany("INSERT INTO t VALUES (?)", [(True,), (False,)])
        stored = connection.execute("SELECT typeof(lost), lost FROM t ORDER BY rowid").fetchall()
    assert stored == [("integer", 1), ("integer", 0)]
