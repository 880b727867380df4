"""Finding, opening and migrating the fleet database; hands out sessions. Nothing runs at import."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db.errors import DatabaseError
from db.migrate import MigrationError, upgrade_to_head
from db.sqlite import apply_pragmas, prepare_sqlite_file, sqlite_file_path

DATABASE_URL_ENV = "FLEET_DB"


def default_database_path() -> Path:
    """$XDG_DATA_HOME/fleet/fleet.db, or ~/.local/share/fleet/fleet.db when that is unset."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "fleet" / "fleet.db"


def default_database_url() -> str:
    """The SQLite URL of the default database file."""
    return f"sqlite:///{default_database_path()}"


def resolve_database_url(url: str | None) -> str:
    """`url` if given, else $FLEET_DB, else the default; a bare path means an SQLite file there."""
    chosen = url or os.environ.get(DATABASE_URL_ENV) or default_database_url()
    if "://" not in chosen:
        return f"sqlite:///{Path(chosen).expanduser().resolve()}"
    return chosen


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


class Database:
    """An open fleet database: its engine, URL and a session factory (expire_on_commit=False)."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self.display_url = _display(engine.url)
        self.sessionmaker: sessionmaker[Session] = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose work is committed on normal exit and rolled back on an exception.

        Driver errors (locked, disk full, constraint violations) surface as DatabaseError with
        the original exception chained.
        """
        with self.sessionmaker() as session:
            try:
                yield session
                session.commit()
            except DBAPIError as exc:
                session.rollback()
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

    Raises DatabaseError naming the URL when the URL is invalid, the file or its directory cannot
    be created, the file is not a database, or migrating fails.
    """
    resolved = resolve_database_url(url)
    try:
        parsed = make_url(resolved)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {resolved!r}: {exc}") from exc
    shown = _display(parsed)
    sqlite_path = sqlite_file_path(parsed)
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


def _create_engine(url: URL, shown: str) -> Engine:
    """An engine for `url`; SQLite connections get fleet's pragmas as they are opened."""
    is_sqlite = url.get_backend_name() == "sqlite"
    connect_args: dict[str, Any] = {"check_same_thread": False} if is_sqlite else {}
    try:
        engine = create_engine(url, connect_args=connect_args)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise DatabaseError(f"cannot use database URL {shown}: {exc}") from exc
    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            apply_pragmas(dbapi_connection, foreign_keys=True)

    return engine
