"""Plain-SQL readers (db.sql, Database.reader) and the SQLAlchemy-free SQLite open (db.engine).

The stdlib path must name the same file SQLAlchemy would, see one snapshot per block, refuse
writes, report errors naming the database, and leave nothing open when the database closes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy.engine import URL, make_url

from db.engine import Database, open_database, resolve_database_url
from db.errors import DatabaseError
from db.hosts import sync_hosts
from db.sql import IN_LIST_CHUNK, SessionReader, in_list
from db.sqlite import plain_sqlite_path, sqlite_file_path, sqlite_url
from db.types import HostFacts
from tests.db.conftest import run_python

URL_CHARACTERS = st.characters(codec="utf-8", exclude_characters="\x00")
PATH_TEXT = st.text(URL_CHARACTERS, min_size=1, max_size=40)


@given(PATH_TEXT)
def test_fleet_renders_an_sqlite_url_as_sqlalchemy_does(database: str) -> None:
    rendered = sqlite_url(database)
    assert rendered == URL.create("sqlite", database=database).render_as_string(
        hide_password=False)
    assert make_url(rendered).database == database


@given(st.text(URL_CHARACTERS, max_size=40) | st.text("/%@:#+ a?~.=&[]", max_size=20))
@example("./~")  # a `~` that the driver reads as a name
@example("./~0")
@example("~/x.db")
def test_a_plain_sqlite_url_names_the_file_sqlalchemy_reads(rest: str) -> None:
    url = f"sqlite:///{rest}"
    path = plain_sqlite_path(url)
    if path is None:  # left to SQLAlchemy: a query, in-memory, or no path at all
        assert "?" in rest or rest in ("", ":memory:") or make_url(url).database in (
            None, "", ":memory:")
        return
    parsed = make_url(url)
    assert path == parsed.database
    assert sqlite_file_path(parsed) == Path(path)
    assert sqlite_url(path) == parsed.render_as_string(hide_password=False)  # Database.url


def test_other_urls_are_left_to_sqlalchemy() -> None:
    for url in ("sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:////tmp/x.db",
                "sqlite:////tmp/x.db?timeout=5", "postgresql://u@h/db"):
        assert plain_sqlite_path(url) is None, url


def test_a_home_in_an_sqlite_url_is_expanded_once_for_fleet_and_the_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_database_url("sqlite:///~/my%20fleet.db") == sqlite_url(
        str(tmp_path / "my fleet.db"))
    assert resolve_database_url("sqlite:///~/x.db?timeout=5") == sqlite_url(
        str(tmp_path / "x.db")) + "?timeout=5"
    for kept in ("sqlite:///./~/x.db", "sqlite:///./~no-such-user-here/x.db",
                 "postgresql://u@h/~db"):
        assert resolve_database_url(kept) == kept
    with pytest.raises(DatabaseError, match=r"no user 'no-such-user-here'.*\./~no-such"):
        resolve_database_url("sqlite:///~no-such-user-here/x.db")
    # A `~` that is not the path's start names a directory of that name, for both.
    assert sqlite_file_path(make_url("sqlite:///./~/x.db")) == Path("~/x.db")
    with open_database(resolve_database_url("sqlite:///~/x.db")) as database:
        assert database.sqlite is not None
    assert (tmp_path / "x.db").is_file()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.db"
    with open_database(str(path)) as database, database.session() as session:
        sync_hosts(session, [HostFacts("a", "10.0.0.1")], now=1)
    return path


def test_a_current_file_opens_and_reads_without_sqlalchemy(sqlite_db: Path) -> None:
    code = (
        "import sys\n"
        "from db.engine import open_database\n"
        "database = open_database(sys.argv[1])\n"
        "with database.reader() as reader:\n"
        "    print(reader.scalars('SELECT name FROM hosts'))\n"
        "print('sqlalchemy' in sys.modules)\n"
        "with database.session():\n"
        "    pass\n"
        "print('sqlalchemy' in sys.modules)\n"
        "database.close()\n"
    )
    assert run_python(code, str(sqlite_db)).stdout.split() == ["['a']", "False", "True"]


def test_a_block_reads_one_snapshot(sqlite_db: Path) -> None:
    with open_database(str(sqlite_db)) as database:
        with database.reader() as reader:
            before = reader.scalars("SELECT name FROM hosts ORDER BY name")
            with database.session() as session:  # another connection commits meanwhile
                sync_hosts(session, [HostFacts("b", "10.0.0.2")], now=2)
            assert reader.scalars("SELECT name FROM hosts ORDER BY name") == before == ["a"]
        with database.reader() as reader:
            assert reader.scalars("SELECT name FROM hosts ORDER BY name") == ["a", "b"]


def test_a_reader_refuses_writes_and_errors_name_the_database(sqlite_db: Path) -> None:
    with open_database(str(sqlite_db)) as database:
        refused = f"database error on .*{sqlite_db.name}.*readonly"
        with pytest.raises(DatabaseError, match=refused), database.reader() as reader:
            reader.rows("DELETE FROM hosts")
        with pytest.raises(DatabaseError, match="no such table"), database.reader() as reader:
            reader.rows("SELECT * FROM no_such_table")
        with database.reader() as reader:  # the pool goes on after a failed block
            assert reader.scalar("SELECT count(*) FROM hosts") == 1


def test_closing_closes_every_reader(sqlite_db: Path) -> None:
    database = open_database(str(sqlite_db))
    with database.reader() as first, database.reader() as second:  # two pooled connections
        assert first.scalar("SELECT 1") == second.scalar("SELECT 1") == 1
    database.close()
    leftovers = sorted(p.name for p in sqlite_db.parent.iterdir() if p.name != sqlite_db.name)
    assert leftovers == []  # the last connection checkpointed and removed -wal and -shm
    with pytest.raises(sqlite3.ProgrammingError):
        first.rows("SELECT 1")


def test_session_and_engine_readers_see_the_same_rows(database: Database) -> None:
    with database.session() as session:
        sync_hosts(session, [HostFacts("x", "10.0.0.9", port=2200)], now=5)
        in_session = SessionReader(session).rows(  # the session's own, not yet committed
            "SELECT name, port FROM hosts WHERE name = :name", {"name": "x"})
    with database.reader() as reader:
        placeholders, bound = in_list("name", ["x", "nobody"])
        read = reader.rows(f"SELECT name, port FROM hosts WHERE name IN ({placeholders})", bound)
    with pytest.raises(DatabaseError, match="database error on"), database.reader() as reader:
        reader.rows("SELECT nope FROM hosts")
    assert [tuple(row) for row in in_session] == [tuple(row) for row in read] == [("x", 2200)]


def test_in_list_needs_values() -> None:
    assert in_list("id", [3, 4]) == (":id_0, :id_1", {"id_0": 3, "id_1": 4})
    with pytest.raises(ValueError, match="at least one"):
        in_list("id", [])


def test_rows_in_asks_in_chunks_and_answers_no_values_with_no_rows(database: Database) -> None:
    names = [f"h{index}" for index in range(IN_LIST_CHUNK + 3)]  # two chunks
    with database.writer() as writer:
        sync_hosts(writer, [HostFacts(name, f"10.1.{index // 250}.{index % 250}")
                            for index, name in enumerate(names)], now=5)
    sql = "SELECT name FROM hosts WHERE name IN ({values})"
    with database.reader() as reader:
        found = reader.rows_in(sql, "name", [*names, "nobody"])
        none = reader.rows_in(sql, "name", [])
    assert sorted(row[0] for row in found) == sorted(names)
    assert none == []
