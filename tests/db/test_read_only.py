"""A database file this user cannot write: reads work unmigrated; writes, old schemas are refused.

Root ignores permission bits, so the read-only file is made real for root too: `chattr +i` on
the file (SQLite may still create its -shm beside it) or a read-only bind mount of its directory
in a private mount namespace (no side file can be created: the immutable open). A chmod 0400
case runs when the suite is not root.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from db.engine import open_database
from db.errors import DatabaseError, ReadOnlyDatabase
from db.events import add_event, list_events
from db.host_reads import list_hosts
from db.hosts import sync_hosts
from db.migrate import head_revision
from db.sql import SessionReader
from db.types import HostFacts
from tests.db.conftest import REPO_ROOT

IS_ROOT = os.geteuid() == 0


def _can_chattr(directory: Path) -> bool:
    probe = directory / "chattr-probe"
    probe.touch()
    try:
        marked = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False)
        return marked.returncode == 0
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
        probe.unlink()


@contextmanager
def _immutable(path: Path) -> Iterator[list[str]]:
    """`path` marked immutable (root cannot write it either); yields the command prefix ([])."""
    if not IS_ROOT or shutil.which("chattr") is None or not _can_chattr(path.parent):
        pytest.skip("chattr +i needs root and a file system that supports it")
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield []
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@contextmanager
def _read_only_mount(path: Path) -> Iterator[list[str]]:
    """A command prefix that runs its command with `path`'s directory bind-mounted read-only."""
    if not IS_ROOT or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    directory = str(path.parent)
    script = (f"mount --bind {directory} {directory} && "
              f"mount -o remount,ro,bind {directory} && exec \"$@\"")
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", "true"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {probe.stderr.decode().strip()}")
    yield ["unshare", "--mount", "sh", "-c", script, "sh"]


@contextmanager
def _mode_0400(path: Path) -> Iterator[list[str]]:
    """`path` chmod 0400 (only meaningful when not root)."""
    if IS_ROOT:
        pytest.skip("root ignores a 0400 mode (the chattr and mount cases cover root)")
    path.chmod(0o400)
    try:
        yield []
    finally:
        path.chmod(0o600)


ReadOnlyMaker = Callable[[Path], AbstractContextManager[list[str]]]
MAKERS: list[ReadOnlyMaker] = [_immutable, _read_only_mount, _mode_0400]


def _populated(path: Path, revision: str | None = None) -> Path:
    """A closed fleet database at `path` with one host and one event (optionally set back to an
    older schema revision)."""
    database = open_database(str(path))
    with database.session() as session:
        host_ids = sync_hosts(session, [HostFacts("gpu01", "10.0.0.1")], now=1000)
        add_event(session, ts=int(time.time()) - 60, kind="host_down", severity="warning",
                  message="gpu01 stopped answering", host_id=host_ids["gpu01"])
    database.close()
    if revision is not None:
        connection = sqlite3.connect(path)
        with connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        connection.close()
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists()  # closed cleanly: nothing beside the file
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_immutable_file_is_read_without_migrating_and_refuses_writes(tmp_path: Path) -> None:
    path = _populated(tmp_path / "fleet.db")
    before = _digest(path)
    with _immutable(path):
        database = open_database(str(path))
        try:
            assert database.read_only_file == path
            with database.session() as session:
                assert [host.name for host in list_hosts(SessionReader(session))] == ["gpu01"]
                assert [event.message for event in list_events(session)] == [
                    "gpu01 stopped answering"
                ]
            with (
                pytest.raises(ReadOnlyDatabase, match="read-only") as caught,
                database.session() as session,
            ):
                sync_hosts(session, [HostFacts("gpu02", "10.0.0.2")], now=2000)
            assert str(path) in str(caught.value)
            # The plain-SQL writer `fleet status` records through is refused the same way.
            with (
                pytest.raises(ReadOnlyDatabase, match="read-only"),
                database.writer() as writer,
            ):
                sync_hosts(writer, [HostFacts("gpu02", "10.0.0.2")], now=2000)
        finally:
            database.close()
    assert _digest(path) == before


def test_file_in_a_directory_this_user_cannot_write_is_opened_read_only(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    path = _populated(directory / "fleet.db")
    with _immutable(directory):  # the file stays writable; no -wal/-shm can be created beside it
        database = open_database(str(path))
        try:
            assert database.read_only_file == path
            assert "cannot create files in its directory" in database.read_only_reason
            with database.session() as session:
                assert [host.name for host in list_hosts(SessionReader(session))] == ["gpu01"]
            with (
                pytest.raises(ReadOnlyDatabase, match="directory") as caught,
                database.session() as session,
            ):
                sync_hosts(session, [HostFacts("gpu02", "10.0.0.2")], now=2000)
            assert f"database file {path} is read-only" in str(caught.value)
        finally:
            database.close()
    assert sorted(item.name for item in directory.iterdir()) == ["fleet.db"]


def test_read_only_file_with_an_older_schema_is_refused(tmp_path: Path) -> None:
    path = _populated(tmp_path / "fleet.db", revision="0003")
    with _immutable(path), pytest.raises(ReadOnlyDatabase) as caught:
        open_database(str(path))
    message = str(caught.value)
    assert str(path) in message and "read-only" in message
    assert f"schema revision 0003, but this fleet reads revision {head_revision()}" in message


def test_read_only_file_that_is_not_a_fleet_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.commit()
    connection.close()
    with _immutable(path), pytest.raises(ReadOnlyDatabase, match="no fleet schema"):
        open_database(str(path))


def test_read_only_file_that_is_not_a_database_at_all_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some text, not SQLite\n" * 100)
    with _immutable(path), pytest.raises(DatabaseError, match=f"cannot read database file {path}"):
        open_database(str(path))


def _fleet(prefix: list[str], home: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("FLEET_", "XDG_"))}
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local" / "share"),
                "PYTHONPATH": str(REPO_ROOT)})
    return subprocess.run(
        [*prefix, sys.executable, "-m", "fleet.cli.main", "--db", str(db), *args],
        cwd=home, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.parametrize("make_read_only", MAKERS, ids=["chattr", "ro-mount", "mode-0400"])
def test_cli_reads_a_read_only_database_and_refuses_writes(
    tmp_path: Path, make_read_only: ReadOnlyMaker
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "inventory.yaml").write_text("hosts:\n  gpu01: {address: 10.0.0.1}\n")
    data = tmp_path / "data"
    data.mkdir()
    path = _populated(data / "fleet.db")
    before = _digest(path)
    with make_read_only(path) as prefix:
        reads = {
            name: _fleet(prefix, home, path, *args)
            for name, args in {
                "hosts": ["hosts"],
                "events": ["events", "--since", "30d"],
                "tasks": ["tasks"],
                "history": ["history", "gpus", "--since", "1h"],
            }.items()
        }
        write = _fleet(prefix, home, path, "drain", "gpu01")
        # The monitor registers its hosts before the first probe: refused at once, not a
        # traceback (the address is never reached).
        monitor = _fleet(prefix, home, path, "monitor", "--interval", "1")
    for name, result in reads.items():
        assert result.returncode == 0, (name, result.stderr)
        assert "read-only" not in result.stderr, name
    assert "gpu01" in reads["hosts"].stdout
    assert "gpu01 stopped answering" in reads["events"].stdout
    assert write.returncode == 4, write.stderr
    assert f"database file {path} is read-only" in write.stderr
    assert write.stdout == ""
    assert monitor.returncode == 4, monitor.stderr
    assert "read-only" in monitor.stderr
    assert "Traceback" not in monitor.stderr
    assert _digest(path) == before
