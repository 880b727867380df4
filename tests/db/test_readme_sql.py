"""Every SQL example in the README runs against a real, populated fleet database."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from db.engine import Database
from db.retention import rollup_gpu_minutes
from db.samples import record_samples
from db.types import GpuSampleIn
from tests.db.conftest import SeededFleet

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_sql(backend: str) -> list[str]:
    """The README's SQL blocks for `backend`: its own (```sql BACKEND) and the unmarked ones."""
    blocks = re.findall(r"```sql( sqlite| postgresql)?\n(.*?)```", README.read_text(),
                        flags=re.DOTALL)
    return [sql for mark, sql in blocks if mark.strip() in ("", backend)]


def test_readme_has_sql_examples_for_both_backends() -> None:
    sqlite, postgresql = _readme_sql("sqlite"), _readme_sql("postgresql")
    assert len(sqlite) == len(postgresql) >= 4
    # Each dialect's variant answers the same question (the same leading comment).
    assert [sql.splitlines()[0] for sql in sqlite] == [sql.splitlines()[0] for sql in postgresql]


def _run_as_a_user_would(database: Database, sql_blocks: list[str]) -> list[list[tuple[Any, ...]]]:
    """Each block through the bare driver, as `sqlite3 FILE` or `psql` would run it."""
    if database.engine.dialect.name == "sqlite":
        connection = sqlite3.connect(database.engine.url.database or "")
        try:
            return [connection.execute(sql).fetchall() for sql in sql_blocks]
        finally:
            connection.close()
    raw = database.engine.raw_connection()
    try:
        results = []
        for sql in sql_blocks:
            cursor = raw.cursor()
            cursor.execute(sql)
            results.append([tuple(row) for row in cursor.fetchall()])
            cursor.close()
        return results
    finally:
        raw.close()


def test_readme_sql_examples_run(database: Database, seeded: SeededFleet) -> None:
    now_ms = int(time.time() * 1000)
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    with database.session() as session:
        record_samples(session, [], [
            GpuSampleIn(gpu_id=gpu_id, ts=now_ms - 3_600_000 + i * 1000, temperature_c=60.0 + i,
                        utilization_gpu_pct=50.0, process_count=0)
            for i in range(5)
        ])
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=now_ms)

    results = _run_as_a_user_would(database, _readme_sql(database.engine.dialect.name))

    hottest = results[0]
    assert hottest[0][:3] == ("alpha", 0, 64.0)
    free_now = results[1]
    assert ("alpha", 0) in {(row[0], row[1]) for row in free_now}
    assert results[2] == []  # no tasks yet
    daily = results[3]
    assert daily and daily[0][0] == "alpha" and float(daily[0][2]) == 50.0
