"""`db backup` while another process writes, and `db check` on healthy and corrupted files."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from db.backup import NotSqliteError, backup_sqlite, check_sqlite
from db.engine import Database
from db.errors import DatabaseError

BATCH_ROWS = 100

# Inserts events in transactions of BATCH_ROWS rows until the stop file appears (max 30 s).
WRITER = f"""
import os, sqlite3, sys, time
path, stop = sys.argv[1], sys.argv[2]
connection = sqlite3.connect(path, timeout=10, isolation_level=None)
connection.execute("PRAGMA journal_mode = WAL")
deadline = time.monotonic() + 30
batches = 0
while not os.path.exists(stop) and time.monotonic() < deadline:
    connection.execute("BEGIN IMMEDIATE")
    connection.executemany(
        "INSERT INTO events (ts, kind, severity, message) VALUES (?, 'load', 'info', ?)",
        [(batches, "x" * 200) for _ in range({BATCH_ROWS})])
    connection.execute("COMMIT")
    batches += 1
    if batches == 1:
        print("ready", flush=True)
print(batches, flush=True)
"""


def _count_events(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        connection.close()


@pytest.mark.sqlite_only
def test_backup_is_consistent_while_another_process_writes(database: Database,
                                                           tmp_path: Path) -> None:
    source = Path(database.engine.url.database or "")
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(source), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready", writer.stderr
        copies = []
        for number in range(3):
            destination = tmp_path / f"copy{number}.db"
            result = backup_sqlite(database.url, destination)
            assert result.verified == "quick_check ok"
            copies.append(destination)
        stop.touch()
        stdout, stderr = writer.communicate(timeout=30)
        assert writer.returncode == 0, stderr
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    counts = [_count_events(copy) for copy in copies]
    assert all(count > 0 and count % BATCH_ROWS == 0 for count in counts), counts
    assert counts == sorted(counts)
    assert _count_events(source) == int(stdout.strip()) * BATCH_ROWS >= counts[-1]
    for copy in copies:
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
        assert check_sqlite(f"sqlite:///{copy}").ok
        assert not Path(f"{copy}-wal").exists()


@pytest.mark.sqlite_only
def test_backup_refuses_to_overwrite_without_force(database: Database, tmp_path: Path) -> None:
    destination = tmp_path / "copy.db"
    destination.write_text("precious")
    with pytest.raises(DatabaseError, match="already exists"):
        backup_sqlite(database.url, destination)
    assert destination.read_text() == "precious"
    backup_sqlite(database.url, destination, force=True)
    assert check_sqlite(f"sqlite:///{destination}").ok
    assert list(tmp_path.glob(".copy.db.*")) == []


def test_backup_and_check_are_sqlite_only() -> None:
    with pytest.raises(NotSqliteError, match="not an SQLite file database"):
        backup_sqlite("postgresql://fleet:secret@db.example/fleet", Path("x.db"))
    with pytest.raises(NotSqliteError) as info:
        check_sqlite("postgresql://fleet:secret@db.example/fleet")
    assert "secret" not in str(info.value)


@pytest.mark.sqlite_only
def test_check_healthy_then_corrupted_copy(database: Database, tmp_path: Path) -> None:
    source = Path(database.engine.url.database or "")
    connection = sqlite3.connect(source)
    connection.executemany("INSERT INTO events (ts, kind, severity, message) VALUES (?,?,?,?)",
                           [(i, "k", "info", "m" * 300) for i in range(2000)])
    connection.commit()
    connection.close()
    healthy = check_sqlite(database.url)
    assert healthy.ok and healthy.revision == healthy.head
    copy = tmp_path / "copy.db"
    backup_sqlite(database.url, copy)
    page_size = 4096
    size = copy.stat().st_size
    with open(copy, "r+b") as handle:
        for offset in range(page_size * 2, size - page_size, page_size * 7):
            handle.seek(offset + 100)
            handle.write(os.urandom(600))
    broken = check_sqlite(f"sqlite:///{copy}")
    assert not broken.ok
    assert broken.problems
