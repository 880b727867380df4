"""GPU history through the stdlib sqlite3 driver: the same points as through SQLAlchemy.

A short command reads an SQLite file with db.sql.SqliteReader and never imports SQLAlchemy;
the service reads through SessionReader. Both run the same SQL text, so the points must be
identical, value and type, from raw samples, minutes and 5-minute periods alike.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from db.engine import Database
from db.history import gpu_history, matching_gpu_ids
from db.models import GpuSample
from db.retention import rollup_gpu_five_minutes, rollup_gpu_minutes
from db.rollup_history import gpu_history_with_rollups
from db.rollup_periods import MINUTE_MS
from db.sql import SessionReader, SqliteReader
from db.types import GpuHistoryPoint
from tests.db.conftest import SeededFleet
from tests.db.test_rollup_history import BASE_MS, STEP_MS, _store

pytestmark = pytest.mark.sqlite_only

FILTERS = [{}, {"host": "alpha"}, {"gpu": "GPU-beta-0"}, {"gpu": "alpha:0"},
           {"host": "beta", "gpu": "alpha:0"}, {"gpu": "nosuch:0"}]
RANGES_MIN = ((0, 40), (-10, 50), (7.5, 31.25), (21, 23))


def _exact(points: list[GpuHistoryPoint]) -> list[tuple[tuple[str, Any], ...]]:
    """Each point's fields with their types: 1 and 1.0 differ here."""
    return [tuple((type(value).__name__, value) for value in astuple(point))
            for point in points]


@pytest.fixture
def plain(database: Database, seeded: SeededFleet, db_path: Path) -> Iterator[SqliteReader]:
    """_store's samples rolled up to 23 minutes in (periods to 20), the raw samples of the
    first 15 minutes pruned so that only the rollups hold them; a stdlib sqlite3 reader on
    the file."""
    _store(database, seeded)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 23 * MINUTE_MS + 30_000)
        rollup_gpu_five_minutes(session)
        session.execute(delete(GpuSample).where(GpuSample.ts < BASE_MS + 15 * MINUTE_MS))
    connection = sqlite3.connect(db_path)
    try:
        yield SqliteReader(connection)
    finally:
        connection.close()


def test_stdlib_sqlite3_reads_the_same_history_as_sqlalchemy(
    database: Database, plain: SqliteReader
) -> None:
    compared = 0
    with database.session() as session:
        reader = SessionReader(session)
        for where in FILTERS:
            assert matching_gpu_ids(plain, host=where.get("host"), gpu=where.get("gpu")) == (
                matching_gpu_ids(reader, host=where.get("host"), gpu=where.get("gpu")))
        for query, where, bucket_s, limit, (since_min, until_min) in itertools.product(
                (gpu_history, gpu_history_with_rollups), FILTERS, (None, 7, 60, 300, 900),
                (None, 5), RANGES_MIN):
            arguments = {"since_ms": BASE_MS + int(since_min * MINUTE_MS),
                         "until_ms": BASE_MS + int(until_min * MINUTE_MS),
                         "bucket_s": bucket_s, "limit": limit, **where}
            through_sqlalchemy = query(reader, **arguments)
            assert _exact(query(plain, **arguments)) == _exact(through_sqlalchemy), arguments
            compared += bool(through_sqlalchemy)
    assert compared > 300  # most combinations have points


def test_stdlib_sqlite3_reads_the_pruned_minutes_from_the_rollups(plain: SqliteReader) -> None:
    points = gpu_history_with_rollups(plain, since_ms=BASE_MS, until_ms=BASE_MS + 40 * MINUTE_MS,
                                      bucket_s=300)
    every_sample = 40 * MINUTE_MS // STEP_MS * 2  # two GPUs
    assert sum(point.samples for point in points) == every_sample
    assert len(points) == 8 * 2

