"""The SQLAlchemy side of opening a database: engines with fleet's pragmas, creating and
migrating, and what to install when a driver is missing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from db.engine import Database, open_read_only
from db.errors import DatabaseError
from db.migrate import MigrationError, upgrade_to_head
from db.sqlite import (
    SqliteFile,
    apply_pragmas,
    prepare_sqlite_file,
    read_only_reason,
    sqlite_file_path,
)
from db.urls import check_database_url


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def open_with_engine(resolved: str, *, migrate: bool = True) -> Database:
    """db.engine.open_database for every case its SQLAlchemy-free path leaves: a new or older
    SQLite file, another form of SQLite URL, or another database. `resolved` is a URL."""
    check_database_url(resolved)  # a bad URL or SQLite option: nothing opened or created
    parsed = make_url(resolved)
    shown = _display(parsed)
    sqlite_path = sqlite_file_path(parsed)
    reason = None if sqlite_path is None else read_only_reason(sqlite_path)
    if sqlite_path is not None and reason is not None:
        return open_read_only(sqlite_path, resolved, reason)
    engine = create_engine_for(parsed, shown)  # first: a bad URL option creates no file
    if sqlite_path is not None:
        try:
            prepare_sqlite_file(sqlite_path)
        except DatabaseError:  # the path is not a regular file
            engine.dispose()
            raise
        except OSError as exc:
            engine.dispose()
            reason = exc.strerror or str(exc)
            raise DatabaseError(f"cannot create database file {sqlite_path}: {reason}") from exc
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
    # Readers of a file named without URL options use the stdlib driver, as after a plain open.
    plain_file = sqlite_path is not None and not parsed.query
    sqlite = (SqliteFile(Path(os.path.abspath(str(engine.url.database)))) if plain_file
              else None)
    return Database(parsed.render_as_string(hide_password=False), engine=engine,
                    display_url=_display(engine.url), sqlite=sqlite)


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


def create_engine_for(url: URL | str, shown: str, *, read_only: bool = False) -> Engine:
    """An engine for `url`; SQLite connections get fleet's pragmas as they are opened."""
    parsed = make_url(url)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    connect_args: dict[str, Any] = {"check_same_thread": False} if is_sqlite else {}
    try:
        engine = create_engine(parsed, connect_args=connect_args)
    except ImportError as exc:
        raise _missing_driver(exc, shown) from exc
    except (ArgumentError, NoSuchModuleError) as exc:
        raise DatabaseError(f"cannot use database URL {shown}: {exc}") from exc
    except (TypeError, ValueError) as exc:  # a URL option the driver cannot take (?timeout=x)
        raise DatabaseError(f"cannot use database URL {shown}: bad option: {exc}") from exc
    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            apply_pragmas(dbapi_connection, foreign_keys=True, read_only=read_only)

    return engine
