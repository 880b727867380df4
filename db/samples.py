"""Writing host and GPU samples in batches (one COPY or executemany per table, one transaction).

Samples are the hot write path (every GPU, every interval), so rows go to the driver as plain
tuples: on PostgreSQL (psycopg) through COPY FROM STDIN, elsewhere through an executemany of
SQL compiled once per dialect, skipping per-row parameter processing; a stdlib SQLite writer
(db.sql.SqliteWriter) runs the same INSERT without SQLAlchemy. A reading outside its column's
integer range is stored as NULL (and counted) rather than failing the batch it came in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import fields
from functools import cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from db.sql import SessionWriter, SqliteWriter, SqlWriter
from db.types import GpuSampleIn, HostSampleIn

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Dialect
    from sqlalchemy.orm import Session

HOST_SAMPLE_FIELDS = tuple(f.name for f in fields(HostSampleIn))
GPU_SAMPLE_FIELDS = tuple(f.name for f in fields(GpuSampleIn))
_FIELDS = {"host_samples": HOST_SAMPLE_FIELDS, "gpu_samples": GPU_SAMPLE_FIELDS}
# The readings each sample table stores in a nullable integer column, by field position:
# the fields typed `int | None` (SQLite's INTEGER holds 64 bits; integer_bounds gives the
# bounds of other dialects from the models).
_NULLABLE_INTS = {
    table_name: tuple(position for position, field in enumerate(fields(kind))
                      if field.type == "int | None")
    for table_name, kind in (("host_samples", HostSampleIn), ("gpu_samples", GpuSampleIn))
}
_host_values = attrgetter(*HOST_SAMPLE_FIELDS)
_gpu_values = attrgetter(*GPU_SAMPLE_FIELDS)
INT64_RANGE = (-(2**63), 2**63 - 1)
INT32_RANGE = (-(2**31), 2**31 - 1)

Row = tuple[Any, ...]
log = logging.getLogger("db.samples")


def record_samples(
    target: Session | SqlWriter,
    host_samples: Sequence[HostSampleIn],
    gpu_samples: Sequence[GpuSampleIn],
) -> int:
    """Insert the samples and commit, as one transaction (one COPY or executemany per table).

    Returns how many readings were stored as NULL because they do not fit their column (an
    integer beyond 64 bits, or beyond 32 where the column is 4 bytes); the other values and
    rows are stored. Raises (and rolls back) when any sample names an unknown host id; GPU ids
    are not checked here (no foreign key, see db.references: `fleet db check` reports them).
    """
    return record_sample_rows(target, [_host_values(sample) for sample in host_samples],
                              [_gpu_values(sample) for sample in gpu_samples])


def record_sample_rows(target: Session | SqlWriter, host_rows: Sequence[Row],
                       gpu_rows: Sequence[Row]) -> int:
    """record_samples for rows given as tuples in HOST_SAMPLE_FIELDS / GPU_SAMPLE_FIELDS order
    (the monitor's path: no dataclass per reading)."""
    if isinstance(target, SqliteWriter):
        return _record_sqlite_rows(target, host_rows, gpu_rows)
    session = target.executor if isinstance(target, SessionWriter) else target
    assert not isinstance(session, SqlWriter), f"no sample path for {type(target).__name__}"
    nulled = 0
    try:
        connection = session.connection()
        dialect = connection.dialect
        if dialect.name == "postgresql":
            # Telemetry: the commit need not wait for its WAL flush. A server crash can lose
            # the last moments of samples (3 x wal_writer_delay, 0.6 s by default), never
            # corrupt or reorder them; claims, tasks and events' own transactions stay synchronous.
            connection.exec_driver_sql("SET LOCAL synchronous_commit = off")
        for table_name, given in (("host_samples", host_rows), ("gpu_samples", gpu_rows)):
            if not given:
                continue
            rows, bad = _fit(dialect, table_name, list(given))
            nulled += bad
            if dialect.name == "postgresql" and dialect.driver == "psycopg":
                _copy_rows(connection, table_name, rows)
            else:
                _execute_many(connection, table_name, rows)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return nulled


def _record_sqlite_rows(writer: SqliteWriter, host_rows: Sequence[Row],
                        gpu_rows: Sequence[Row]) -> int:
    """record_sample_rows through the stdlib driver: the same INSERT, fit and one commit."""
    nulled = 0
    try:
        for table_name, given in (("host_samples", host_rows), ("gpu_samples", gpu_rows)):
            if not given:
                continue
            positions = _NULLABLE_INTS[table_name]
            rows, bad = _fit_rows(table_name, list(given),
                                  tuple((position, *INT64_RANGE) for position in positions))
            nulled += bad
            names = _FIELDS[table_name]
            writer.execute_many(f"INSERT INTO {table_name} ({', '.join(names)}) VALUES "
                                f"({', '.join('?' for _ in names)})", rows)
        writer.commit()
    except BaseException:
        writer.rollback()
        raise
    return nulled


def _execute_many(connection: Connection, table_name: str, rows: list[Row]) -> None:
    """One executemany of the compiled INSERT (SQLite and every non-COPY driver)."""
    sql, positional = _insert_sql(connection.dialect, table_name)
    names = _FIELDS[table_name]
    params = rows if positional else [dict(zip(names, row, strict=True)) for row in rows]
    connection.exec_driver_sql(sql, params)


def _copy_rows(connection: Connection, table_name: str, rows: list[Row]) -> None:
    """PostgreSQL's COPY FROM STDIN through psycopg's copy API, in the session's transaction
    (several times faster than executemany: one statement, rows streamed)."""
    from sqlalchemy.exc import DBAPIError

    names = _FIELDS[table_name]
    dialect = connection.dialect
    driver_connection = connection.connection.driver_connection
    assert driver_connection is not None
    statement = f"COPY {table_name} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)"
    driver_error = dialect.loaded_dbapi.Error
    try:
        with driver_connection.cursor() as cursor, cursor.copy(statement) as copy:
            copy.set_types(list(_copy_types(dialect, table_name)))
            for row in rows:
                copy.write_row(row)
    except driver_error as exc:
        # What SQLAlchemy does for statements it runs: the matching DBAPIError subclass, and a
        # connection that went away is not returned to the pool.
        disconnected = dialect.is_disconnect(exc, connection.connection, None)
        if disconnected:
            connection.invalidate(exc)
        raise DBAPIError.instance(statement, None, exc, driver_error,
                                  connection_invalidated=disconnected, dialect=dialect) from exc


def _table(table_name: str) -> Table:
    """The models' Table of a sample table (imports the models: not on the stdlib path)."""
    from db.models import GpuSample, HostSample

    model = HostSample if table_name == "host_samples" else GpuSample
    table: Table = model.__table__  # type: ignore[assignment]
    return table


@cache
def _copy_types(dialect: Dialect, table_name: str) -> tuple[str, ...]:
    """The PostgreSQL type of each sample field's column, in field order (binary COPY needs
    it exactly)."""
    from sqlalchemy import BigInteger, Boolean, Float, Integer

    pg_types = ((Boolean, "bool"), (BigInteger, "int8"), (Integer, "int4"), (Float, "float8"))
    table = _table(table_name)
    types = []
    for name in _FIELDS[table_name]:
        column_type = table.c[name].type.dialect_impl(dialect)
        types.append(next(pg for kind, pg in pg_types if isinstance(column_type, kind)))
    return tuple(types)


@cache
def integer_bounds(dialect: Dialect, table_name: str) -> tuple[tuple[int, int, int], ...]:
    """(field position, lowest, highest) of each nullable integer reading of a sample table.

    SQLite's INTEGER always holds 64 bits; elsewhere an Integer column holds 32.
    """
    from sqlalchemy import BigInteger, Integer

    table, names = _table(table_name), _FIELDS[table_name]
    bounds = []
    for position, name in enumerate(names):
        column = table.c[name]
        if not column.nullable or not isinstance(column.type, Integer):
            continue
        wide = dialect.name == "sqlite" or isinstance(column.type.dialect_impl(dialect), BigInteger)
        low, high = INT64_RANGE if wide else INT32_RANGE
        bounds.append((position, low, high))
    return tuple(bounds)


def _fit(dialect: Dialect, table_name: str, rows: list[Row]) -> tuple[list[Row], int]:
    """`rows` with every integer reading outside its column's range set to None; the count."""
    return _fit_rows(table_name, rows, integer_bounds(dialect, table_name))


def _fit_rows(table_name: str, rows: list[Row], bounded: tuple[tuple[int, int, int], ...]
              ) -> tuple[list[Row], int]:
    """`rows` with each reading at a bounded position outside its (lowest, highest) set to
    None; the count. The check is a min/max per column (cheap); rows are rebuilt only when
    one is out of range."""
    offending: set[int] = set()
    for position, low, high in bounded:
        values = [row[position] for row in rows if row[position] is not None]
        if values and (min(values) < low or max(values) > high):
            offending.add(position)
    if not offending:
        return rows, 0
    bounds = {position: (low, high) for position, low, high in bounded if position in offending}
    nulled = 0
    fitted: list[Row] = []
    for row in rows:
        values = list(row)
        for position, (low, high) in bounds.items():
            value = values[position]
            if value is not None and not low <= value <= high:
                values[position] = None
                nulled += 1
        fitted.append(tuple(values))
    log.warning("%s: %d out-of-range readings stored as NULL", table_name, nulled)
    return fitted, nulled


@cache
def _insert_sql(dialect: Dialect, table_name: str) -> tuple[str, bool]:
    """INSERT SQL for a sample table in `dialect`'s paramstyle; True if its params are positional.

    Positional parameters follow the field order of HostSampleIn / GpuSampleIn.
    """
    table, names = _table(table_name), _FIELDS[table_name]
    compiled = table.insert().inline().compile(dialect=dialect, column_keys=list(names))
    if compiled.positional and tuple(compiled.positiontup or ()) != names:
        raise RuntimeError(f"unexpected parameter order for {table_name}: {compiled.positiontup}")
    return str(compiled), compiled.positional


def prune_samples(session: Session, older_than_ms: int) -> tuple[int, int]:
    """Delete samples with ts < older_than_ms; returns (host rows, GPU rows) deleted."""
    from sqlalchemy import delete

    from db.models import GpuSample, HostSample

    host_deleted = session.execute(delete(HostSample).where(HostSample.ts < older_than_ms))
    gpu_deleted = session.execute(delete(GpuSample).where(GpuSample.ts < older_than_ms))
    return (host_deleted.rowcount or 0, gpu_deleted.rowcount or 0)  # type: ignore[attr-defined]
