"""Opening the database: URL resolution, private files, pragmas, migrations, clear errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from db.engine import (
    default_database_url,
    open_database,
    resolve_database_url,
)
from db.errors import DatabaseError
from db.host_reads import list_hosts
from db.hosts import sync_hosts
from db.migrate import head_revision, script_head_revision
from db.sql import SessionReader
from db.types import HostFacts
from tests.db.conftest import race


def test_default_url_follows_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_database_url() == f"sqlite:///{tmp_path}/fleet/fleet.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_database_url() == f"sqlite:///{tmp_path}/home/.local/share/fleet/fleet.db"


def test_resolve_prefers_argument_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("FLEET_DB", raising=False)
    assert resolve_database_url(None) == default_database_url()
    monkeypatch.setenv("FLEET_DB", "postgresql://u@db.example/fleet")
    assert resolve_database_url(None) == "postgresql://u@db.example/fleet"
    assert resolve_database_url("sqlite:////x/y.db") == "sqlite:////x/y.db"
    monkeypatch.chdir(tmp_path)
    assert resolve_database_url("rel/f.db") == f"sqlite:///{tmp_path}/rel/f.db"


def test_new_file_is_private_and_migrated(db_path: Path) -> None:
    database = open_database(str(db_path))
    try:
        assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(db_path.parent.stat().st_mode) == 0o700
        with database.engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            assert version == head_revision()
            with database.session() as session:
                sync_hosts(session, [HostFacts("a", "10.0.0.1")], now=1)
        for side_file in (Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
            if side_file.exists():
                assert stat.S_IMODE(side_file.stat().st_mode) == 0o600
    finally:
        database.close()


def test_an_existing_files_mode_is_its_owners_choice(db_path: Path) -> None:
    open_database(str(db_path)).close()
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600  # created private
    os.chmod(db_path, 0o640)  # shared with the lab's group for plain SQL, on purpose
    open_database(str(db_path)).close()
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o640


def test_pragmas_are_active(database_url_file: str) -> None:
    database = open_database(database_url_file)
    try:
        with database.engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 10_000
            assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
            # a grown database's flushes: checkpoint spacing and page cache (db.sqlite)
            assert connection.execute(text("PRAGMA wal_autocheckpoint")).scalar() == 16_000
            assert connection.execute(text("PRAGMA cache_size")).scalar() == -32 * 1024
    finally:
        database.close()


@pytest.fixture
def database_url_file(db_path: Path) -> str:
    return f"sqlite:///{db_path}"


def test_second_open_keeps_data_and_changes_nothing(db_path: Path) -> None:
    with open_database(str(db_path)) as database, database.session() as session:
        sync_hosts(session, [HostFacts("keep", "10.0.0.9")], now=5)
    schema_before = _schema(db_path)
    with open_database(str(db_path)) as database, database.session() as session:
        assert [host.name for host in list_hosts(SessionReader(session))] == ["keep"]
    assert _schema(db_path) == schema_before


def _schema(db_path: Path) -> list[tuple[str, str]]:
    with open_database(str(db_path), migrate=False) as database, database.engine.connect() as conn:
        rows = conn.execute(text("SELECT name, sql FROM sqlite_master ORDER BY name")).all()
        return [(str(name), str(sql)) for name, sql in rows]


def test_bad_url_raises_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="invalid database URL"):
        open_database("not a url://x")
    with pytest.raises(DatabaseError, match="nosuchdialect"):
        open_database("nosuchdialect://host/db")
    with pytest.raises(DatabaseError, match=r"cannot use database URL .*x\.db.*bad option"):
        open_database(f"sqlite:///{tmp_path}/new/x.db?timeout=soon")
    assert not (tmp_path / "new").exists()  # a URL refused creates neither file nor directory


def test_unwritable_directory_raises_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "plainfile"
    blocker.write_text("a file where a directory should be")
    with pytest.raises(DatabaseError, match=r"cannot create database file .*plainfile/fleet\.db"):
        open_database(str(blocker / "fleet.db"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_raises_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(DatabaseError, match="Permission denied"):
        open_database(str(locked / "fleet.db"))


def test_corrupt_file_raises_clear_error(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not an SQLite database, just junk " * 200)
    with pytest.raises(DatabaseError, match=r"cannot open database .*file is not a database"):
        open_database(str(db_path))


def test_database_from_newer_fleet_is_refused(db_path: Path) -> None:
    with open_database(str(db_path)) as database, database.session() as session:
        session.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(DatabaseError, match=r"cannot migrate database .*9999"):
        open_database(str(db_path))


def test_head_constant_matches_migration_scripts() -> None:
    assert head_revision() == script_head_revision()


OPEN_ON_GO = """
import db.engine, db.hosts, db.types  # imports done before the race: only opening races
ready_then_wait_for_go(sys.argv[1])
path, name = sys.argv[2], sys.argv[3]
with db.engine.open_database(path) as database, database.session() as session:
    db.hosts.sync_hosts(session, [db.types.HostFacts(name, name + ".example")], now=1)
print("opened")
"""


def test_concurrent_first_open_migrates_once(db_path: Path, tmp_path: Path) -> None:
    outputs = race(OPEN_ON_GO, tmp_path / "go", [[str(db_path), f"w{i}"] for i in range(4)])
    assert outputs == ["opened"] * 4
    with open_database(str(db_path)) as database, database.session() as session:
        names = sorted(host.name for host in list_hosts(SessionReader(session)))
        assert names == ["w0", "w1", "w2", "w3"]
        versions = session.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        assert versions == [head_revision()]


def test_a_bare_path_with_url_characters_names_exactly_that_file(tmp_path: Path) -> None:
    path = tmp_path / "my db?v=1#x%20.db"
    database = open_database(str(path))
    database.close()
    assert path.is_file()
    assert sorted(item.name for item in tmp_path.iterdir() if ".db" in item.name) == [path.name]
