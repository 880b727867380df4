"""Database maintenance: backup and read-only check (SQLite file or PostgreSQL), retention.

Backup and check work on a URL without opening (and so without migrating) the database: a
backup file is checked as it is. Retention runs through an open context.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fleet.errors import ConfigError
from fleet.storage import redact_url, storage_errors

if TYPE_CHECKING:
    from db.backup import BackupResult, CheckResult
    from db.copy import CopyResult, Progress
    from fleet.context import FleetContext
    from fleet.health.retention import RetentionResult, RetentionSettings


def _backend(db_url: str | None) -> tuple[str, str]:
    """The resolved URL and its backend ("sqlite" or "postgresql"); ConfigError (exit 2) for
    any other database, whose own tools must be used."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from db.backup import sqlite_path_of
    from db.engine import resolve_database_url

    with storage_errors(None):
        url = resolve_database_url(db_url)
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError as exc:
        raise ConfigError(f"invalid database URL {redact_url(url)!r}: {exc}") from exc
    if backend == "sqlite":
        with storage_errors("resolve the database", url):
            sqlite_path_of(url)
        return url, backend
    if backend == "postgresql":
        return url, backend
    raise ConfigError(f"{redact_url(url)}: fleet db backup/check support SQLite files and "
                      "PostgreSQL; use this database's own tools")


def backup(db_url: str | None, destination: Path, *, force: bool = False) -> BackupResult:
    """Copy the database to `destination` consistently, even while it is written: SQLite's
    online backup, or pg_dump for PostgreSQL (ConfigError, exit 2, when pg_dump is missing)."""
    from db.backup import backup_sqlite
    from db.pg_maintenance import ToolMissing, backup_postgresql

    url, backend = _backend(db_url)
    if backend == "sqlite":
        with storage_errors("back up the database"):
            return backup_sqlite(url, destination, force=force)
    with storage_errors("back up the database"):
        try:
            return backup_postgresql(url, destination, force=force)
        except ToolMissing as exc:
            raise ConfigError(str(exc)) from exc


def check(db_url: str | None) -> CheckResult:
    """Check the database without changing it: integrity_check and foreign_key_check of an
    SQLite file, or constraints, index validity and orphan rows on PostgreSQL; both compare
    the schema revision with this fleet's."""
    from db.backup import check_sqlite
    from db.pg_maintenance import check_postgresql

    url, backend = _backend(db_url)
    with storage_errors("check the database"):
        return check_sqlite(url) if backend == "sqlite" else check_postgresql(url)


def copy(source_url: str, target_url: str, *, force: bool = False,
         batch_rows: int = 5000, progress: Progress | None = None) -> CopyResult:
    """Copy a whole fleet history between databases (SQLite ⇄ PostgreSQL): one snapshot of the
    source, one transaction on the target, row counts verified per table; a target holding
    data is refused (StorageError, exit 4) unless `force`."""
    from db.copy import copy_database
    from db.engine import resolve_database_url

    if batch_rows <= 0:
        raise ConfigError(f"--batch-rows must be positive, not {batch_rows}")
    with storage_errors(None):
        return copy_database(resolve_database_url(source_url), resolve_database_url(target_url),
                             force=force, batch_rows=batch_rows, progress=progress)


class DatabaseService:
    """Maintenance of the open database."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context

    async def apply_retention(self, settings: RetentionSettings,
                              now: float | None = None) -> RetentionResult:
        """Roll raw GPU samples up into 1- and 5-minute buckets and prune rows older than
        `settings` keep (the monitor's: `monitor_settings().retention`), as of `now`."""
        from fleet.health.retention import apply_retention

        moment = self.context.now() if now is None else now
        return await self.context.write(
            "apply retention", lambda session: apply_retention(session, settings, moment))
