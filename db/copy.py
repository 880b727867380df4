"""Copying a whole fleet history from one database to another (SQLite ⇄ PostgreSQL), verified.

The source is read in one snapshot (a single read transaction); the target is written in one
transaction, so a failed or interrupted copy leaves it as it was (all-or-nothing). Rows keep
their ids, tables go in foreign-key order, and each table's row count in the target is checked
against the source's before the commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Table, delete, func, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError

from db.engine import Database, open_database, resolve_database_url
from db.errors import DatabaseError
from db.migrate import HEAD_REVISION, current_revision, newer_schema_reason
from db.models import Base
from db.sqlite import refuse_non_regular, sqlite_file_path

DEFAULT_BATCH_ROWS = 5000
# (table, rows copied so far in it, rows it has): called after every batch.
Progress = Callable[[str, int, int], None]


class TargetNotEmpty(DatabaseError):
    """The target already holds fleet data and --force was not given."""


@dataclass(frozen=True, slots=True)
class CopyResult:
    """A finished copy: rows per table (verified equal in both), and the URLs (redacted)."""

    source: str
    target: str
    rows: dict[str, int]

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def tables() -> list[Table]:
    """Every fleet table, parents before children."""
    return list(Base.metadata.sorted_tables)


def copy_database(source_url: str, target_url: str, *, force: bool = False,
                  batch_rows: int = DEFAULT_BATCH_ROWS,
                  progress: Progress | None = None) -> CopyResult:
    """Copy every row of the fleet database at `source_url` into `target_url`.

    The target is created and migrated if needed. Raises TargetNotEmpty when it holds rows
    and not `force` (with `force` its rows are replaced), and DatabaseError naming the (redacted)
    URL when the source is not at this fleet's schema revision, either side fails, or a count
    differs after the copy.
    """
    if batch_rows <= 0:
        raise ValueError(f"batch_rows must be positive, not {batch_rows}")
    resolved = resolve_database_url(source_url)
    source_file = sqlite_file_path(make_url(resolved))
    if source_file is not None:
        refuse_non_regular(source_file, "source database")
        if not source_file.is_file():
            raise DatabaseError(f"database file {source_file} does not exist")
    source = open_database(resolved, migrate=False)
    try:
        _require_head(source)  # before the target is created or migrated
        target = open_database(target_url)
        try:
            if source.display_url == target.display_url:
                raise DatabaseError(
                    f"source and target are the same database: {source.display_url}")
            rows = _copy(source, target, force=force, batch_rows=batch_rows, progress=progress)
        finally:
            target.close()
    finally:
        source.close()
    return CopyResult(source.display_url, target.display_url, rows)


def _copy(source: Database, target: Database, *, force: bool, batch_rows: int,
          progress: Progress | None) -> dict[str, int]:
    try:
        reading = source.engine.connect()
        if source.engine.dialect.name == "postgresql":
            reading = reading.execution_options(isolation_level="REPEATABLE READ")
        with reading, reading.begin(), target.engine.connect() as writing, writing.begin():
            revision = current_revision(reading)
            if revision != HEAD_REVISION:
                raise DatabaseError(_not_at_head(source.display_url, revision))
            counts = {table.name: int(reading.scalar(select(func.count()).select_from(table))
                                      or 0) for table in tables()}
            held = _rows_held(writing)
            if held and not force:
                raise TargetNotEmpty(
                    f"{target.display_url} already holds fleet data ({held} rows); use --force "
                    "to replace it"
                )
            for table in reversed(tables()):
                writing.execute(delete(table))
            for table in tables():
                _copy_table(reading, writing, table, counts[table.name], batch_rows, progress)
            _verify(writing, counts, target.display_url)
            if writing.dialect.name == "postgresql":
                _reset_sequences(writing)
    except DBAPIError as exc:
        raise DatabaseError(f"copy from {source.display_url} to {target.display_url} failed: "
                            f"{exc.orig}") from exc
    return counts


def _require_head(source: Database) -> None:
    """DatabaseError when the source is not at this fleet's schema revision."""
    try:
        with source.engine.connect() as connection:
            revision = current_revision(connection)
    except DBAPIError as exc:
        raise DatabaseError(f"cannot read {source.display_url}: {exc.orig}") from exc
    if revision != HEAD_REVISION:
        raise DatabaseError(_not_at_head(source.display_url, revision))


def _not_at_head(shown: str, revision: str | None) -> str:
    """Why the source at `revision` (not head) cannot be copied, and what to do about it."""
    newer = newer_schema_reason(revision)
    if newer is not None:
        return f"cannot copy from {shown}: {newer}"
    found = f"schema revision {revision}" if revision else "no fleet schema"
    return (f"{shown} has {found}, this fleet copies revision {HEAD_REVISION}: run any fleet "
            "command on it first, which migrates it")


def _rows_held(connection: Connection) -> int:
    return sum(int(connection.scalar(select(func.count()).select_from(table)) or 0)
               for table in tables())


def _copy_table(reading: Connection, writing: Connection, table: Table, total: int,
                batch_rows: int, progress: Progress | None) -> None:
    order = list(table.primary_key.columns)
    result = reading.execution_options(yield_per=batch_rows).execute(
        select(table).order_by(*order))
    done = 0
    for batch in result.mappings().partitions():
        writing.execute(table.insert(), [dict(row) for row in batch])
        done += len(batch)
        if progress is not None:
            progress(table.name, done, total)
    if progress is not None and done == 0:
        progress(table.name, 0, total)


def _verify(writing: Connection, counts: dict[str, int], shown: str) -> None:
    for table in tables():
        copied = int(writing.scalar(select(func.count()).select_from(table)) or 0)
        if copied != counts[table.name]:
            raise DatabaseError(f"copy to {shown}: {table.name} has {copied} rows, the source "
                                f"{counts[table.name]}; nothing was committed")


def _reset_sequences(writing: Connection) -> None:
    """Point each serial id sequence past the copied ids (rows were inserted with their ids)."""
    for table in tables():
        if [column.name for column in table.primary_key.columns] != ["id"]:
            continue
        # pg_get_serial_sequence is NULL for a table without one, and setval(NULL) is a no-op.
        writing.execute(text(
            f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
            f"COALESCE((SELECT max(id) FROM {table.name}), 0) + 1, false)"))
