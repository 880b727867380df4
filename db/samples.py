"""Writing host and GPU samples in batches (one driver executemany per table, one transaction).

Samples are the hot write path (every GPU, every interval), so rows go to the DBAPI cursor as
plain tuples through SQL compiled once per dialect, skipping per-row parameter processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from functools import cache
from operator import attrgetter

from sqlalchemy import Table, delete
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


def record_samples(
    session: Session,
    host_samples: Sequence[HostSampleIn],
    gpu_samples: Sequence[GpuSampleIn],
) -> None:
    """Insert the samples and commit, as one transaction (one executemany per table).

    Raises (and rolls back) when any sample names an unknown host or GPU id.
    """
    try:
        connection = session.connection()
        dialect = connection.dialect
        if host_samples:
            sql, positional = _insert_sql(dialect, "host_samples")
            rows = [_host_values(sample) for sample in host_samples]
            params = (
                rows
                if positional
                else [dict(zip(HOST_SAMPLE_FIELDS, r, strict=True)) for r in rows]
            )
            connection.exec_driver_sql(sql, params)
        if gpu_samples:
            sql, positional = _insert_sql(dialect, "gpu_samples")
            rows = [_gpu_values(sample) for sample in gpu_samples]
            params = (
                rows if positional else [dict(zip(GPU_SAMPLE_FIELDS, r, strict=True)) for r in rows]
            )
            connection.exec_driver_sql(sql, params)
        session.commit()
    except BaseException:
        session.rollback()
        raise


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
