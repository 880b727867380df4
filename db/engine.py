"""Finding, opening and migrating the fleet database; hands out sessions and readers.

Importing this loads no SQLAlchemy, and neither does opening an SQLite file that is already at
this code's schema and only reading it (`Database.reader`): a short read-only command pays
for the stdlib driver alone. The engine (db.connect) is made on the first session, and always
when the database has to be created or migrated or is not a plain SQLite file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from db.errors import DatabaseError, InvalidDatabaseUrl, ReadOnlyDatabase
from db.migrate import HEAD_REVISION, newer_schema_reason
from db.sql import SessionReader, SessionWriter, SqliteReader, SqliteWriter, SqlReader, SqlWriter
from db.sqlite import (
    SqliteFile,
    expand_home,
    expand_home_in_sqlite_url,
    plain_sqlite_path,
    prepare_sqlite_file,
    read_only_file,
    read_only_reason,
    schema_revision,
    sqlite_url,
)
from db.urls import check_database_url, check_path_text

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session, sessionmaker

DATABASE_URL_ENV = "FLEET_DB"


def default_database_path() -> Path:
    """$XDG_DATA_HOME/fleet/fleet.db, or ~/.local/share/fleet/fleet.db when that is unset."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "fleet" / "fleet.db"


def default_database_url() -> str:
    """The SQLite URL of the default database file."""
    return sqlite_url(str(default_database_path()))


def resolve_database_url(url: str | None) -> str:
    """`url` if given, else $FLEET_DB (unset when empty), else the default; a bare path means
    an SQLite file there, a leading `~` or `~user` that home directory.

    Raises InvalidDatabaseUrl, before anything is opened or created, for an empty `url`, an
    unknown `~user`, a URL that cannot be parsed, a NUL byte in a file path, and an SQLite
    URL option fleet does not support (db.urls).
    """
    if url is not None and not url.strip():
        raise InvalidDatabaseUrl(f"empty database URL {url!r}: give a file path or a URL")
    chosen = url or os.environ.get(DATABASE_URL_ENV) or default_database_url()
    if "://" not in chosen:
        check_path_text(chosen, chosen)
        return sqlite_url(str(Path(expand_home(chosen, chosen)).resolve()))
    resolved = expand_home_in_sqlite_url(chosen)
    check_database_url(resolved)
    return resolved


class Database:
    """An open fleet database: its URL, an engine and session factory made on first use
    (expire_on_commit=False), and readers for plain-SQL reads (db.sql).

    `sqlite` is set for an SQLite file: readers then use the stdlib driver on a small pool of
    its own connections, whether or not an engine exists. `read_only_file` is the SQLite file
    when it was opened for reading only (this user cannot write it), `read_only_reason` says
    why; every write then fails with ReadOnlyDatabase. `fence`, when set (a controller pair's
    leader, see db.leadership), runs first in every session and refuses it (raising) once this
    process may no longer write.
    """

    def __init__(
        self,
        url: str,
        *,
        engine: Engine | None = None,
        display_url: str | None = None,
        sqlite: SqliteFile | None = None,
        read_only_file: Path | None = None,
        read_only_reason: str = "",
    ) -> None:
        self.url = url
        self.display_url = display_url or url
        self.sqlite = sqlite
        self.read_only_file = read_only_file
        self.read_only_reason = read_only_reason
        self.fence: Callable[[Session], None] | None = None
        self._engine = engine
        self._sessionmaker: sessionmaker[Session] | None = None
        self._lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._idle_writers: list[sqlite3.Connection] = []
        self._closed = False

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, made on first use."""
        with self._lock:
            if self._engine is None:
                from db.connect import create_engine_for

                url = (self.sqlite.engine_url if self.sqlite is not None else None) or self.url
                self._engine = create_engine_for(url, self.display_url,
                                                 read_only=self.read_only_file is not None)
            return self._engine

    @property
    def sessionmaker(self) -> sessionmaker[Session]:
        """The session factory (expire_on_commit=False), made on first use."""
        if self._sessionmaker is None:
            from sqlalchemy.orm import sessionmaker

            self._sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        return self._sessionmaker

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose work is committed on normal exit and rolled back on an exception.

        Driver errors (locked, disk full, constraint violations) surface as DatabaseError with
        the original exception chained.
        """
        from sqlalchemy.exc import DBAPIError

        with self.sessionmaker() as session:
            try:
                if self.fence is not None:
                    self.fence(session)
                yield session
                session.commit()
            except DBAPIError as exc:
                session.rollback()
                if self.read_only_file is not None:
                    raise read_only_error(
                        self.read_only_file, self.read_only_reason, exc.orig
                    ) from exc
                raise DatabaseError(f"database error on {self.display_url}: {exc.orig}") from exc
            except BaseException:
                session.rollback()
                raise

    @contextmanager
    def reader(self) -> Iterator[SqlReader]:
        """A reader whose statements see one consistent snapshot of the database.

        An SQLite file is read with the stdlib driver (no SQLAlchemy), other databases through
        an engine connection. Driver errors surface as DatabaseError naming the database.
        """
        if self.sqlite is None:
            with self._engine_reader() as reader:
                yield reader
            return
        connection = self._take_reader()
        finished = False
        try:
            connection.execute("BEGIN")
            yield SqliteReader(connection)
            finished = True
        except sqlite3.Error as exc:
            raise DatabaseError(f"database error on {self.display_url}: {exc}") from exc
        finally:
            self._give_back_reader(connection, commit=finished)

    @contextmanager
    def writer(self) -> Iterator[SqlWriter]:
        """A plain-SQL writer whose work is committed on normal exit, rolled back on an error.

        A writable SQLite file without a fence is written with the stdlib driver, so a short
        command that records (`fleet status`) never imports SQLAlchemy and the monitor's flush
        skips it; any other database writes through a session (read-only refusals, the
        leader's fence and errors as there).
        Driver errors surface as DatabaseError naming the database.
        """
        if self.sqlite is None or self.read_only_file is not None or self.fence is not None:
            with self.session() as session:
                yield SessionWriter(session)
            return
        connection = self._take_writer()
        writer = SqliteWriter(connection)
        try:
            yield writer
            writer.commit()
        except sqlite3.Error as exc:
            connection.close()  # closing rolls the failed block's transaction back
            raise DatabaseError(f"database error on {self.display_url}: {exc}") from exc
        except BaseException:
            connection.close()
            raise
        with self._lock:
            if not self._closed:
                self._idle_writers.append(connection)
                return
        connection.close()

    def _take_writer(self) -> sqlite3.Connection:
        assert self.sqlite is not None
        with self._lock:
            if self._idle_writers:
                return self._idle_writers.pop()
        try:
            return self.sqlite.connect_writer()
        except sqlite3.Error as exc:
            raise DatabaseError(f"cannot open database {self.display_url}: {exc}") from exc

    @contextmanager
    def _engine_reader(self) -> Iterator[SqlReader]:
        from sqlalchemy.exc import DBAPIError

        try:
            with self.engine.connect() as connection:
                yield SessionReader(connection)
        except DBAPIError as exc:
            raise DatabaseError(f"database error on {self.display_url}: {exc.orig}") from exc

    def _take_reader(self) -> sqlite3.Connection:
        assert self.sqlite is not None
        with self._lock:
            if self._idle_readers:
                return self._idle_readers.pop()
        try:
            return self.sqlite.connect_reader()
        except sqlite3.Error as exc:
            raise DatabaseError(f"cannot open database {self.display_url}: {exc}") from exc

    def _give_back_reader(self, connection: sqlite3.Connection, *, commit: bool) -> None:
        """End the block's transaction (COMMIT after a block that finished, else ROLLBACK) and
        keep the connection for the next reader; one that cannot end it is closed instead."""
        try:
            if connection.in_transaction:
                connection.execute("COMMIT" if commit else "ROLLBACK")
        except sqlite3.Error as exc:
            connection.close()
            if commit:  # a failed block is already raising its own error
                raise DatabaseError(f"database error on {self.display_url}: {exc}") from exc
            return
        with self._lock:
            if not self._closed:
                self._idle_readers.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close every pooled connection (the engine's and the readers')."""
        with self._lock:
            self._closed = True
            idle = self._idle_readers + self._idle_writers
            self._idle_readers, self._idle_writers = [], []
            engine = self._engine
        for connection in idle:
            connection.close()
        if engine is not None:
            engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def open_database(url: str | None = None, *, migrate: bool = True) -> Database:
    """Open (creating if needed) the database at `url` and bring its schema to the newest version.

    An existing SQLite file this user cannot write is opened for reading only, unmigrated, if
    its schema is this code's (see open_read_only). Raises DatabaseError naming the URL when
    the URL is invalid or its driver is missing, the file or its directory cannot be created,
    the file is not a database, or migrating fails.
    """
    resolved = resolve_database_url(url)
    database = plain_sqlite_path(resolved)
    if database is not None:
        path, canonical = Path(database), sqlite_url(database)  # the URL as SQLAlchemy renders it
        reason = read_only_reason(path)
        if reason is not None:
            return open_read_only(path, canonical, reason)
        if migrate:
            current = _open_current_sqlite(path, canonical)
            if current is not None:
                return current
    from db.connect import open_with_engine

    return open_with_engine(resolved, migrate=migrate)


def _open_current_sqlite(path: Path, url: str) -> Database | None:
    """The SQLite file at `url`, opened without SQLAlchemy when it exists and is at this
    code's schema; None otherwise (creating, migrating and every error are left to the engine
    path, which reports them as before)."""
    if not path.is_file():
        return None
    try:
        prepare_sqlite_file(path)
    except OSError:
        return None
    sqlite = SqliteFile(Path(os.path.abspath(path)))
    try:
        connection = sqlite.connect_reader()
    except sqlite3.Error:
        return None
    try:
        revision = schema_revision(connection)
    except sqlite3.Error:
        connection.close()
        return None
    if revision != HEAD_REVISION:
        connection.close()
        return None
    database = Database(url, sqlite=sqlite)
    database._idle_readers.append(connection)
    return database


def open_read_only(path: Path, url: str, reason: str) -> Database:
    """Open the SQLite file at `path` for reading only: no file created or chmod-ed, no WAL
    switch, no migration, every write refused.

    Raises DatabaseError when the file cannot be read as a database, and ReadOnlyDatabase when
    its schema is not the one this code reads (it would need a migration, which is a write).
    """
    try:
        sqlite = read_only_file(path)
        connection = sqlite.connect_reader()
        try:
            revision = schema_revision(connection)
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read database file {path} (read-only): {exc}") from exc
    if revision != HEAD_REVISION:
        newer = newer_schema_reason(revision)
        if newer is not None:
            raise ReadOnlyDatabase(f"cannot read database file {path}: {newer}")
        found = "no fleet schema" if revision is None else f"schema revision {revision}"
        raise ReadOnlyDatabase(
            f"database file {path} is read-only for this user ({reason}) and has {found}, but "
            f"this fleet reads revision {HEAD_REVISION}; any fleet command run once by a user "
            "who can write it (e.g. `fleet events`) migrates it"
        )
    return Database(url, sqlite=sqlite, read_only_file=path, read_only_reason=reason)


def read_only_error(path: Path, reason: str, detail: object) -> ReadOnlyDatabase:
    """The error for a write attempted on a database opened read-only."""
    return ReadOnlyDatabase(
        f"database file {path} is read-only for this user ({reason}): fleet can show what it "
        f"holds but cannot record anything in it ({detail}); use a writable copy (--db FILE) or "
        "ask its owner"
    )
