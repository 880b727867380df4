"""Database maintenance: online backup and read-only check of a file, retention on demand.

Backup and check work on a URL without opening (and so without migrating) the database: a
backup file is checked as it is. Retention runs through an open context.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fleet.errors import ConfigError
from fleet.storage import storage_errors

if TYPE_CHECKING:
    from db.backup import BackupResult, CheckResult
    from fleet.context import FleetContext
    from fleet.health.retention import RetentionResult


def sqlite_url(db_url: str | None) -> str:
    """The resolved URL of an SQLite file; ConfigError (exit 2) for any other database."""
    from db.backup import NotSqliteError, sqlite_path_of
    from db.engine import resolve_database_url

    url = resolve_database_url(db_url)
    with storage_errors("resolve the database", url):
        try:
            sqlite_path_of(url)
        except NotSqliteError as exc:
            raise ConfigError(str(exc)) from exc
    return url


def backup(db_url: str | None, destination: Path, *, force: bool = False) -> BackupResult:
    """Copy the SQLite database to `destination` consistently, even while it is written."""
    from db.backup import backup_sqlite

    url = sqlite_url(db_url)
    with storage_errors("back up the database"):
        return backup_sqlite(url, destination, force=force)


def check(db_url: str | None) -> CheckResult:
    """integrity_check, foreign_key_check and schema revision of an SQLite file, read-only."""
    from db.backup import check_sqlite

    url = sqlite_url(db_url)
    with storage_errors("check the database"):
        return check_sqlite(url)


class DatabaseService:
    """Maintenance of the open database."""

    def __init__(self, context: FleetContext) -> None:
        self.context = context

    async def apply_retention(self, *, raw_days: float, rollup_days: float) -> RetentionResult:
        """Roll raw GPU samples up into 1-minute buckets and prune rows older than kept."""
        from fleet.health.retention import RetentionSettings, apply_retention

        try:
            settings = RetentionSettings(raw_days=raw_days, rollup_days=rollup_days)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        now = self.context.now()
        return await self.context.write(
            "apply retention", lambda session: apply_retention(session, settings, now))
