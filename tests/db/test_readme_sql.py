"""Every SQL example in the README runs against a real, populated fleet database."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

from db.engine import Database
from db.retention import rollup_gpu_minutes
from db.samples import record_samples
from db.types import GpuSampleIn
from tests.db.conftest import SeededFleet

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_sql() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_sql_examples() -> None:
    assert len(_readme_sql()) >= 4


def test_readme_sql_examples_run(database: Database, seeded: SeededFleet, db_path: Path) -> None:
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

    connection = sqlite3.connect(db_path)  # what a user's `sqlite3` shell does
    try:
        results = [connection.execute(sql).fetchall() for sql in _readme_sql()]
    finally:
        connection.close()

    hottest = results[0]
    assert hottest[0][:3] == ("alpha", 0, 64.0)
    free_now = results[1]
    assert ("alpha", 0) in {(row[0], row[1]) for row in free_now}
    daily = results[3]
    assert daily and daily[0][0] == "alpha"
