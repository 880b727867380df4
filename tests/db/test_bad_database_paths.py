"""The storage layer on database paths and URLs that are not fleet databases: it refuses them
before opening or creating anything, and changes no file it did not create."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from db.backup import backup_sqlite, check_sqlite
from db.engine import open_database, open_read_only, resolve_database_url
from db.errors import DatabaseError, InvalidDatabaseUrl, ReadOnlyDatabase
from db.pg_maintenance import backup_postgresql
from db.sqlite import prepare_sqlite_file, sqlite_url
from tests.fixtures.disk_listing import listing


@pytest.fixture
def odd_paths(tmp_path: Path) -> Path:
    """A directory holding a FIFO, a symbolic link to it and a subdirectory."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to("fifo")
    (tmp_path / "dir").mkdir()
    return tmp_path


@pytest.mark.parametrize(("name", "kind"), [("fifo", "a FIFO"), ("to-fifo", "a FIFO"),
                                            ("dir", "a directory")])
def test_a_path_that_is_not_a_regular_file_is_refused_untouched(
        odd_paths: Path, name: str, kind: str) -> None:
    before = listing(odd_paths)
    with pytest.raises(DatabaseError, match=f"{odd_paths / name} is {kind}, not a regular file"):
        prepare_sqlite_file(odd_paths / name)
    for url in (str(odd_paths / name), sqlite_url(str(odd_paths / name))):
        with pytest.raises(DatabaseError, match=f"database path {odd_paths}/.* is {kind}"):
            open_database(url)
    assert listing(odd_paths) == before


def test_a_symbolic_link_to_a_new_file_creates_it_private(tmp_path: Path) -> None:
    (tmp_path / "link.db").symlink_to("data/target.db")
    for url in (sqlite_url(str(tmp_path / "link.db")), str(tmp_path / "link.db")):
        open_database(url).close()
        assert stat.S_IMODE((tmp_path / "data" / "target.db").stat().st_mode) == 0o600
        assert (tmp_path / "link.db").is_symlink()


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hi\n")
    text.chmod(0o644)
    with pytest.raises(DatabaseError, match="file is not a database"):
        open_database(str(text))
    assert stat.S_IMODE(text.stat().st_mode) == 0o644
    assert text.read_text() == "hi\n"
    assert listing(tmp_path) == {"notes.txt": ("file", 0o644)}

    db_file = tmp_path / "shared.db"
    open_database(str(db_file)).close()
    assert stat.S_IMODE(db_file.stat().st_mode) == 0o600  # created by fleet: private
    db_file.chmod(0o640)
    open_database(str(db_file)).close()  # the plain (stdlib) path
    open_database(sqlite_url(str(db_file)) + "?timeout=5").close()  # the engine path
    assert stat.S_IMODE(db_file.stat().st_mode) == 0o640


@pytest.mark.parametrize(("url", "message"), [
    ("", "empty database URL"),
    ("  ", "empty database URL"),
    ("~no-such-user-here/x.db", "no user 'no-such-user-here'"),
    ("postgresql://[::1/x", "invalid database URL"),
    ("sqlite:////tmp/x/%00x.db", "NUL byte"),
    ("/tmp/x/\x00x.db", "NUL byte"),
    ("sqlite:////tmp/d/x.db?uri=true&mode=ro", "options 'mode', 'uri' are not supported"),
    ("sqlite:////tmp/d/x.db?bogus=1", "option 'bogus' is not supported"),
    ("sqlite+pysqlite:////tmp/d/x.db?isolation_level=AUTOCOMMIT", "'isolation_level'"),
])
def test_a_malformed_url_is_refused_before_anything_is_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    with pytest.raises(InvalidDatabaseUrl, match=message):
        resolve_database_url(url)
    with pytest.raises(InvalidDatabaseUrl, match=message):
        open_database(url)
    assert listing(tmp_path) == {}


def test_supported_sqlite_options_and_an_unset_environment_still_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = sqlite_url(str(tmp_path / "x.db")) + "?timeout=5&cached_statements=10"
    assert resolve_database_url(url) == url
    monkeypatch.setenv("FLEET_DB", "")  # an empty variable is an unset one
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert resolve_database_url(None) == sqlite_url(str(tmp_path / "fleet" / "fleet.db"))


def newer_database(path: Path) -> Path:
    """A fleet database whose schema revision no fleet this old knows."""
    open_database(str(path)).close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    connection.close()
    return path


def test_a_database_from_a_newer_fleet_says_so_everywhere(tmp_path: Path) -> None:
    path = newer_database(tmp_path / "new.db")
    newer = r"written by a newer fleet: schema revision '9999' is unknown to this fleet"
    with pytest.raises(DatabaseError, match=newer) as opened:
        open_database(str(path))
    assert "upgrade fleet" in str(opened.value)
    with pytest.raises(ReadOnlyDatabase, match=newer) as read_only:
        open_read_only(path, sqlite_url(str(path)), "this user cannot write the file")
    assert "migrates" not in str(read_only.value)
    checked = check_sqlite(sqlite_url(str(path)))
    assert not checked.ok and checked.revision == "9999"
    assert any("newer fleet" in problem and "upgrade fleet" in problem
               for problem in checked.problems), checked.problems
    assert not any("migrates" in problem for problem in checked.problems)


def test_check_of_a_file_that_is_not_a_database_raises(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hi\n")
    with pytest.raises(DatabaseError, match=f"cannot check {text}: file is not a database"):
        check_sqlite(sqlite_url(str(text)))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(DatabaseError, match="is a FIFO"):
        check_sqlite(sqlite_url(str(tmp_path / "fifo")))
    assert listing(tmp_path) == {"fifo": ("fifo", 0o644 & ~_umask()), "notes.txt":
                                 ("file", 0o666 & ~_umask())}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_backup_never_replaces_what_is_not_a_regular_file(
        odd_paths: Path, tmp_path: Path) -> None:
    source = tmp_path / "src" / "fleet.db"
    open_database(str(source)).close()
    before = listing(odd_paths)
    for name in ("fifo", "to-fifo", "dir"):
        with pytest.raises(DatabaseError, match=f"{odd_paths / name} is a"):
            backup_sqlite(sqlite_url(str(source)), odd_paths / name, force=True)
        with pytest.raises(DatabaseError, match=f"{odd_paths / name} is a"):
            backup_postgresql("postgresql://fleet@localhost/fleet", odd_paths / name,
                              force=True)
    assert listing(odd_paths) == before
