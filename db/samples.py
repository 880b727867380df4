"""Writing host and GPU samples in batches (one driver executemany per table, one transaction).

Samples are the hot write path (every GPU, every interval), so rows go to the DBAPI cursor as
plain tuples through SQL compiled once per dialect, skipping per-row parameter processing. A
reading outside its column's integer range is stored as NULL (and counted) rather than failing
the batch it came in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import fields
from functools import cache
from operator import attrgetter
from typing import Any

from sqlalchemy import BigInteger, Integer, Table, delete
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from db.models import GpuSample, HostSample
from db.types import GpuSampleIn, HostSampleIn

HOST_SAMPLE_FIELDS = tuple(f.name for f in fields(HostSampleIn))
GPU_SAMPLE_FIELDS = tuple(f.name for f in fields(GpuSampleIn))
HOST_SAMPLES: Table = HostSample.__table__  # type: ignore[assignment]
GPU_SAMPLES: Table = GpuSample.__table__  # type: ignore[assignment]
_host_values = attrgetter(*HOST_SAMPLE_FIELDS)
_gpu_values = attrgetter(*GPU_SAMPLE_FIELDS)
INT64_RANGE = (-(2**63), 2**63 - 1)
INT32_RANGE = (-(2**31), 2**31 - 1)

Row = tuple[Any, ...]
log = logging.getLogger("db.samples")


def record_samples(
    session: Session,
    host_samples: Sequence[HostSampleIn],
    gpu_samples: Sequence[GpuSampleIn],
) -> int:
    """Insert the samples and commit, as one transaction (one executemany per table).

    Returns how many readings were stored as NULL because they do not fit their column (an
    integer beyond 64 bits, or beyond 32 where the column is 4 bytes); the other values and
    rows are stored. Raises (and rolls back) when any sample names an unknown host or GPU id.
    """
    nulled = 0
    try:
        connection = session.connection()
        dialect = connection.dialect
        if host_samples:
            sql, positional = _insert_sql(dialect, "host_samples")
            rows, bad = _fit(dialect, "host_samples",
                             [_host_values(sample) for sample in host_samples])
            nulled += bad
            params = (
                rows
                if positional
                else [dict(zip(HOST_SAMPLE_FIELDS, r, strict=True)) for r in rows]
            )
            connection.exec_driver_sql(sql, params)
        if gpu_samples:
            sql, positional = _insert_sql(dialect, "gpu_samples")
            rows, bad = _fit(dialect, "gpu_samples",
                             [_gpu_values(sample) for sample in gpu_samples])
            nulled += bad
            params = (
                rows if positional else [dict(zip(GPU_SAMPLE_FIELDS, r, strict=True)) for r in rows]
            )
            connection.exec_driver_sql(sql, params)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return nulled


@cache
def integer_bounds(dialect: Dialect, table_name: str) -> tuple[tuple[int, int, int], ...]:
    """(field position, lowest, highest) of each nullable integer reading of a sample table.

    SQLite's INTEGER always holds 64 bits; elsewhere an Integer column holds 32.
    """
    table, names = (
        (HOST_SAMPLES, HOST_SAMPLE_FIELDS)
        if table_name == "host_samples"
        else (GPU_SAMPLES, GPU_SAMPLE_FIELDS)
    )
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
    """`rows` with every integer reading outside its column's range set to None; the count.

    The check is a min/max per column (cheap); rows are rebuilt only when one is out of range.
    """
    offending: set[int] = set()
    for position, low, high in integer_bounds(dialect, table_name):
        values = [row[position] for row in rows if row[position] is not None]
        if values and (min(values) < low or max(values) > high):
            offending.add(position)
    if not offending:
        return rows, 0
    bounds = {position: (low, high) for position, low, high in
              integer_bounds(dialect, table_name) if position in offending}
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
    table, names = (
        (HOST_SAMPLES, HOST_SAMPLE_FIELDS)
        if table_name == "host_samples"
        else (GPU_SAMPLES, GPU_SAMPLE_FIELDS)
    )
    compiled = table.insert().inline().compile(dialect=dialect, column_keys=list(names))
    if compiled.positional and tuple(compiled.positiontup or ()) != names:
        raise RuntimeError(f"unexpected parameter order for {table_name}: {compiled.positiontup}")
    return str(compiled), compiled.positional


def prune_samples(session: Session, older_than_ms: int) -> tuple[int, int]:
    """Delete samples with ts < older_than_ms; returns (host rows, GPU rows) deleted."""
    host_deleted = session.execute(delete(HostSample).where(HostSample.ts < older_than_ms))
    gpu_deleted = session.execute(delete(GpuSample).where(GpuSample.ts < older_than_ms))
    return (host_deleted.rowcount or 0, gpu_deleted.rowcount or 0)  # type: ignore[attr-defined]
