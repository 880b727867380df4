"""The migrated schema: no drift from the models, portable DDL, views that answer queries."""

from __future__ import annotations

import io
import sqlite3
import subprocess
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from db import leadership
from db.engine import Database
from db.migrate import alembic_config
from db.models import Base
from db.samples import record_samples
from db.types import GpuSampleIn
from tests.db.conftest import SeededFleet


def test_models_and_migrations_do_not_drift(database: Database) -> None:
    with database.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection),
                                       [Base.metadata, leadership.metadata])
    assert differences == []


@pytest.mark.sqlite_only
def test_active_allocation_index_is_partial_on_sqlite(database: Database) -> None:
    indexes = inspect(database.engine).get_indexes("allocations")
    active = next(index for index in indexes if index["name"] == "uq_allocations_active_gpu")
    assert active["unique"]
    assert "released_at IS NULL" in str(active["dialect_options"]["sqlite_where"])


def _offline_sql(url: str) -> str:
    config = alembic_config(url)
    buffer = io.StringIO()
    config.output_buffer = buffer
    command.upgrade(config, "head", sql=True)
    return buffer.getvalue()


def test_postgresql_ddl_has_partial_unique_index_and_views() -> None:
    ddl = _offline_sql("postgresql://fleet@localhost/fleet")
    assert (
        "CREATE UNIQUE INDEX uq_allocations_active_gpu ON allocations (gpu_id) "
        "WHERE released_at IS NULL" in ddl
    )
    for view in ("gpu_latest", "gpu_history", "task_history", "active_allocations"):
        assert f"CREATE VIEW {view} AS" in ddl
    assert "BIGSERIAL" in ddl or "BIGINT" in ddl


@pytest.mark.sqlite_only
def test_views_answer_plain_sqlite3_queries(
    database: Database, seeded: SeededFleet, db_path: Path
) -> None:
    alpha0 = seeded.gpu_ids[("alpha", 0)]
    with database.sessionmaker() as session:
        record_samples(
            session,
            [],
            [
                GpuSampleIn(alpha0, 1_000_000, utilization_gpu_pct=10.0),
                GpuSampleIn(alpha0, 1_005_000, utilization_gpu_pct=90.0),
            ],
        )
    with sqlite3.connect(db_path) as connection:
        latest = connection.execute(
            "SELECT host, gpu_index, uuid, ts_ms, ts_s, utilization_gpu_pct FROM gpu_latest "
            "ORDER BY host, gpu_index"
        ).fetchall()
        history = connection.execute(
            "SELECT host, gpu_index, ts_s, utilization_gpu_pct FROM gpu_history ORDER BY ts_ms"
        ).fetchall()
        tasks = connection.execute("SELECT * FROM task_history").fetchall()
    connection.close()
    assert latest == [
        ("alpha", 0, "GPU-alpha-0", 1_005_000, 1005, 90.0),
        ("alpha", 1, "GPU-alpha-1", None, None, None),
        ("beta", 0, "GPU-beta-0", None, None, None),
    ]
    assert history == [("alpha", 0, 1000, 10.0), ("alpha", 0, 1005, 90.0)]
    assert tasks == []


@pytest.mark.sqlite_only
@pytest.mark.skipif(not Path("/usr/bin/sqlite3").exists(), reason="sqlite3 CLI not installed")
def test_sqlite3_cli_reads_views(database: Database, seeded: SeededFleet, db_path: Path) -> None:
    completed = subprocess.run(
        ["/usr/bin/sqlite3", str(db_path), "SELECT host, gpu_index FROM gpu_latest ORDER BY 1, 2"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert completed.stdout.split() == ["alpha|0", "alpha|1", "beta|0"]
