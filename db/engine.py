"""Finding, opening and migrating the fleet database; hands out sessions. Nothing runs at import."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db.errors import DatabaseError, ReadOnlyDatabase
from db.migrate import MigrationError, current_revision, head_revision, upgrade_to_head
from db.sqlite import (
    apply_pragmas,
    prepare_sqlite_file,
    read_only_reason,
    read_only_url,
    sqlite_file_path,
)

DATABASE_URL_ENV = "FLEET_DB"


def default_database_path() -> Path:
    """$XDG_DATA_HOME/fleet/fleet.db, or ~/.local/share/fleet/fleet.db when that is unset."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "fleet" / "fleet.db"


def default_database_url() -> str:
    """The SQLite URL of the default database file."""
    return _sqlite_url(default_database_path())


def resolve_database_url(url: str | None) -> str:
    """`url` if given, else $FLEET_DB, else the default; a bare path means an SQLite file there."""
    chosen = url or os.environ.get(DATABASE_URL_ENV) or default_database_url()
    if "://" not in chosen:
        return _sqlite_url(Path(chosen).expanduser().resolve())
    return chosen


def _sqlite_url(path: Path) -> str:
    """The SQLite URL of the file `path`, `?`, `#` and `%` in its name escaped."""
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


class Database:
    """An open fleet database: its engine, URL and a session factory (expire_on_commit=False).

    `read_only_file` is the SQLite file when it was opened for reading only (this user cannot
    write it), `read_only_reason` says why; every write then fails with ReadOnlyDatabase.
    `fence`, when set (a controller pair's leader, see db.leadership), runs first in every
    session and refuses it (raising) once this process may no longer write.
    """

    def __init__(
        self,
        engine: Engine,
        url: str,
        *,
        read_only_file: Path | None = None,
        read_only_reason: str = "",
    ) -> None:
        self.engine = engine
        self.url = url
        self.read_only_file = read_only_file
        self.read_only_reason = read_only_reason
        self.display_url = _display(make_url(url)) if read_only_file else _display(engine.url)
        self.sessionmaker: sessionmaker[Session] = sessionmaker(engine, expire_on_commit=False)
        self.fence: Callable[[Session], None] | None = None

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose work is committed on normal exit and rolled back on an exception.

        Driver errors (locked, disk full, constraint violations) surface as DatabaseError with
        the original exception chained.
        """
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

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

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
    try:
        parsed = make_url(resolved)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {resolved!r}: {exc}") from exc
    shown = _display(parsed)
    sqlite_path = sqlite_file_path(parsed)
    reason = None if sqlite_path is None else read_only_reason(sqlite_path)
    if sqlite_path is not None and reason is not None:
        return open_read_only(sqlite_path, resolved, reason)
    if sqlite_path is not None:
        try:
            prepare_sqlite_file(sqlite_path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise DatabaseError(f"cannot create database file {sqlite_path}: {reason}") from exc
    engine = _create_engine(parsed, shown)
    try:
        if migrate:
            upgrade_to_head(engine)
        else:
            with engine.connect():
                pass
    except DBAPIError as exc:
        engine.dispose()
        raise DatabaseError(f"cannot open database {shown}: {exc.orig}") from exc
    except (SQLAlchemyError, MigrationError) as exc:
        engine.dispose()
        raise DatabaseError(f"cannot migrate database {shown}: {exc}") from exc
    return Database(engine, parsed.render_as_string(hide_password=False))


def open_read_only(path: Path, url: str, reason: str) -> Database:
    """Open the SQLite file at `path` for reading only: no file created or chmod-ed, no WAL
    switch, no migration, every write refused.

    Raises DatabaseError when the file cannot be read as a database, and ReadOnlyDatabase when
    its schema is not the one this code reads (it would need a migration, which is a write).
    """
    shown = f"{path} (read-only)"
    try:
        url_read_only = read_only_url(path)
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read database file {path} (read-only): {exc}") from exc
    engine = _create_engine(url_read_only, shown, read_only=True)
    try:
        with engine.connect() as connection:
            revision = current_revision(connection)
    except DBAPIError as exc:
        engine.dispose()
        raise DatabaseError(f"cannot read database file {path} (read-only): {exc.orig}") from exc
    if revision != head_revision():
        engine.dispose()
        found = "no fleet schema" if revision is None else f"schema revision {revision}"
        raise ReadOnlyDatabase(
            f"database file {path} is read-only for this user ({reason}) and has {found}, but "
            f"this fleet reads revision {head_revision()}; any fleet command run once by a user "
            "who can write it (e.g. `fleet db check`) migrates it"
        )
    return Database(engine, url, read_only_file=path, read_only_reason=reason)


def read_only_error(path: Path, reason: str, detail: object) -> ReadOnlyDatabase:
    """The error for a write attempted on a database opened read-only."""
    return ReadOnlyDatabase(
        f"database file {path} is read-only for this user ({reason}): fleet can show what it "
        f"holds but cannot record anything in it ({detail}); use a writable copy (--db FILE) or "
        "ask its owner"
    )


# What to install when the DBAPI module a URL needs is missing, by module name.
_DRIVER_HINTS = {
    "psycopg": "pip install 'fleet[postgresql]' (psycopg 3; URL postgresql+psycopg://USER@HOST/DB)",
    "psycopg2": "pip install psycopg2-binary, or pip install 'fleet[postgresql]' and write the "
    "URL as postgresql+psycopg://USER@HOST/DB",
    "pg8000": "pip install pg8000",
    "MySQLdb": "pip install pymysql and write the URL as mysql+pymysql://USER:PASSWORD@HOST/DB "
    "(or pip install mysqlclient for mysql://)",
    "pymysql": "pip install pymysql",
    "mysql": "pip install mysql-connector-python",
    "mariadb": "pip install mariadb",
}


def _missing_driver(exc: ImportError, shown: str) -> DatabaseError:
    """A DatabaseError saying which package provides the DBAPI module that failed to import."""
    module = (exc.name or "").split(".")[0]
    hint = _DRIVER_HINTS.get(module)
    if hint is None:
        return DatabaseError(f"cannot use database URL {shown}: {exc}")
    return DatabaseError(
        f"cannot use database URL {shown}: its driver module {module!r} is not installed; "
        f"install it with: {hint}"
    )


def _create_engine(url: URL, shown: str, *, read_only: bool = False) -> Engine:
    """An engine for `url`; SQLite connections get fleet's pragmas as they are opened."""
    is_sqlite = url.get_backend_name() == "sqlite"
    connect_args: dict[str, Any] = {"check_same_thread": False} if is_sqlite else {}
    try:
        engine = create_engine(url, connect_args=connect_args)
    except ImportError as exc:
        raise _missing_driver(exc, shown) from exc
    except (ArgumentError, NoSuchModuleError) as exc:
        raise DatabaseError(f"cannot use database URL {shown}: {exc}") from exc
    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            apply_pragmas(dbapi_connection, foreign_keys=True, read_only=read_only)

    return engine
