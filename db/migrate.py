"""Applying fleet's Alembic migrations, safely when several processes open a new database at once.

SQLite: the upgrade runs in one `BEGIN IMMEDIATE` transaction on a dedicated connection (foreign
keys off, as Alembic's batch table rebuilds need), so a second process waits for the first and
then finds the schema current. PostgreSQL: a transaction-scoped advisory lock does the same.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db.sqlite import apply_pragmas

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.exc import OperationalError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest revision in MIGRATIONS_DIR, so that opening a current database needs no Alembic
# import (~0.3 s); a test checks it against the scripts.
HEAD_REVISION = "0015"
# Arbitrary constant naming fleet's migration lock among PostgreSQL advisory locks.
POSTGRES_MIGRATION_LOCK_KEY = 0x666C656574
LOCKED_RETRY_DEADLINE_S = 60.0


class MigrationError(Exception):
    """Alembic refused to migrate (e.g. the database is at a revision this code does not know)."""


class NewerSchema(MigrationError):
    """The database is at a schema revision this code does not know: a newer fleet wrote it."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config for fleet's migrations (no alembic.ini); `url` is for offline/CLI use."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest migration revision this code knows."""
    return HEAD_REVISION


def script_head_revision() -> str | None:
    """The newest revision according to the migration scripts themselves (imports Alembic)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def unknown_revisions(revision: str | None) -> list[str]:
    """The revisions in `revision` (as current_revision renders it: comma-separated) that
    none of this code's migrations defines; imports Alembic unless `revision` is head or None."""
    if revision is None or revision == HEAD_REVISION:
        return []
    from alembic.script import ScriptDirectory

    known = {script.revision for script in
             ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    return [part for part in revision.split(",") if part not in known]


def newer_schema_reason(revision: str | None) -> str | None:
    """Why a database at `revision` cannot be used when a newer fleet wrote it (some revision
    is unknown to this code: neither migrating nor reading it is safe), else None."""
    unknown = unknown_revisions(revision)
    if not unknown:
        return None
    names = ", ".join(repr(part) for part in unknown)
    return (f"it was written by a newer fleet: schema revision {names} is unknown to this "
            f"fleet, whose newest is {HEAD_REVISION}; upgrade fleet to use it")


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at, or None if it was never migrated."""
    from sqlalchemy import inspect, text

    if not inspect(connection).has_table("alembic_version"):
        return None
    versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
    return ",".join(sorted(versions)) or None


def is_current(engine: Engine) -> bool:
    """True when the database is already at head (a cheap read; no lock taken)."""
    with engine.connect() as connection:
        return current_revision(connection) == HEAD_REVISION


def upgrade_to_head(engine: Engine) -> None:
    """Apply every pending migration; a no-op when the database is current.

    Retries, within LOCKED_RETRY_DEADLINE_S, when SQLite reports the database locked by another
    process that is migrating at the same moment.
    """
    from sqlalchemy.exc import OperationalError

    deadline = time.monotonic() + LOCKED_RETRY_DEADLINE_S
    attempt = 0
    while True:
        attempt += 1
        try:
            # Even the first read can meet a lock: another process may be switching a new file
            # to WAL or migrating it right now, so it is retried like the migration itself.
            if is_current(engine):
                return
            _upgrade_locked(engine)
            # Pooled connections opened before the migration may hold a stale schema (SQLite's
            # PRAGMA reflection does not reload it), so start the pool afresh.
            engine.dispose()
            return
        except OperationalError as exc:
            if not _is_lock_error(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(min(0.05 * attempt, 1.0))


def _is_lock_error(exc: OperationalError) -> bool:
    message = str(exc.orig).lower()
    return "locked" in message or "busy" in message


def _upgrade_locked(engine: Engine) -> None:
    """Run `alembic upgrade head` inside one transaction that excludes other migrators."""
    from sqlalchemy import text

    if engine.dialect.name == "sqlite":
        migration_engine = _sqlite_migration_engine(engine)
        try:
            with migration_engine.connect() as connection, connection.begin():
                _run_upgrade(connection)
                violations = connection.execute(text("PRAGMA foreign_key_check")).all()
                if violations:
                    raise RuntimeError(f"migration left foreign key violations: {violations[:5]}")
        finally:
            migration_engine.dispose()
        return
    with engine.connect() as connection, connection.begin():
        if engine.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": POSTGRES_MIGRATION_LOCK_KEY}
            )
        _run_upgrade(connection)


def _run_upgrade(connection: Connection) -> None:
    from alembic import command
    from alembic.util import CommandError

    newer = newer_schema_reason(current_revision(connection))
    if newer is not None:
        raise NewerSchema(newer)
    config = alembic_config()
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc


def _sqlite_migration_engine(engine: Engine) -> Engine:
    """A one-connection engine whose transactions start with BEGIN IMMEDIATE (the write lock)."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import NullPool

    migration_engine = create_engine(engine.url, poolclass=NullPool)

    @event.listens_for(migration_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        apply_pragmas(dbapi_connection, foreign_keys=False)
        # Take over BEGIN from the sqlite3 module so DDL runs inside our transaction.
        dbapi_connection.isolation_level = None

    @event.listens_for(migration_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return migration_engine
