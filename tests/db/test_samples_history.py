"""Samples: batched writes read back by another process, throughput, history bucketing."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import astuple, fields
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db.engine import Database
from db.errors import DatabaseError
from db.history import gpu_history
from db.models import HostSample
from db.samples import prune_samples, record_samples
from db.sql import SessionReader
from db.types import GpuHistoryPoint, GpuSampleIn, HostSampleIn
from tests.db.conftest import SeededFleet, run_python

READ_BACK = """
import sys
from db.engine import open_database
from db.history import gpu_history
from db.sql import SessionReader
with open_database(sys.argv[1]) as database, database.session() as session:
    reader = SessionReader(session)
    for point in gpu_history(reader, since_ms=0, until_ms=10**13):
        print(point.host, point.gpu_idx, point.ts_ms, point.util_max, point.mem_used_max)
"""


def test_samples_written_here_are_read_by_another_process(
    database: Database, seeded: SeededFleet, db_url: str
) -> None:
    b0 = seeded.gpu_ids[("beta", 0)]
    with database.sessionmaker() as session:
        record_samples(
            session,
            [HostSampleIn(seeded.host_ids["beta"], 1_700_000_000_000, load_1m=0.5)],
            [
                GpuSampleIn(b0, 1_700_000_000_000, utilization_gpu_pct=12.5, memory_used_bytes=1),
                GpuSampleIn(b0, 1_700_000_001_000, utilization_gpu_pct=80.0),
            ],
        )
    output = run_python(READ_BACK, db_url).stdout.splitlines()
    assert output == ["beta 0 1700000000000 12.5 1", "beta 0 1700000001000 80.0 None"]


def test_record_samples_is_all_or_nothing(database: Database, seeded: SeededFleet) -> None:
    a0 = seeded.gpu_ids[("alpha", 0)]
    beta = seeded.host_ids["beta"]
    # The database refuses a sample without a timestamp; the host sample before it goes too.
    with pytest.raises(DatabaseError, match=r"(?i)null"), database.session() as session:
        record_samples(session, [HostSampleIn(beta, 1, load_1m=0.5)],
                       [GpuSampleIn(a0, 1), GpuSampleIn(a0, None)])  # type: ignore[arg-type]
    with pytest.raises(DatabaseError, match=r"(?i)foreign key"), database.session() as session:
        record_samples(session, [HostSampleIn(beta, 2), HostSampleIn(424242, 3)], [])
    with database.session() as session:
        reader = SessionReader(session)
        assert gpu_history(reader, since_ms=0, until_ms=100) == []
        assert session.scalar(select(func.count()).select_from(HostSample)) == 0


def _point(
    gpu_id: int, host: str, idx: int, ts_ms: int, samples: int, **values: float
) -> GpuHistoryPoint:
    return GpuHistoryPoint(
        host=host,
        gpu_idx=idx,
        uuid=f"GPU-{host}-{idx}",
        gpu_id=gpu_id,
        ts_ms=ts_ms,
        samples=samples,
        util_avg=values.get("util_avg"),
        util_max=values.get("util_max"),
        mem_used_avg=values.get("mem_used_avg"),
        mem_used_max=None if "mem_used_max" not in values else int(values["mem_used_max"]),
        temp_avg=values.get("temp_avg"),
        temp_max=values.get("temp_max"),
        power_avg=values.get("power_avg"),
        power_max=values.get("power_max"),
    )


def test_history_bucketing_matches_hand_computed_values(
    database: Database, seeded: SeededFleet
) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    base = 1_700_000_040_000  # a multiple of 60 s in ms
    with database.sessionmaker() as session:
        record_samples(
            session,
            [],
            [
                # bucket [base, base+60s): util 10, 20, 60 -> avg 30, max 60; temp 50, 70 (+NULL)
                GpuSampleIn(a0, base + 0, 10.0, memory_used_bytes=100, temperature_c=50.0),
                GpuSampleIn(a0, base + 30_000, 20.0, memory_used_bytes=300, temperature_c=70.0),
                GpuSampleIn(a0, base + 59_999, 60.0, memory_used_bytes=200, power_draw_w=100.0),
                # next bucket: one sample
                GpuSampleIn(a0, base + 60_000, 5.0, memory_used_bytes=50, power_draw_w=250.5),
                # another GPU, same first bucket
                GpuSampleIn(a1, base + 1_000, 40.0),
                # outside the asked range
                GpuSampleIn(a0, base + 120_000, 99.0),
                GpuSampleIn(a0, base - 1, 99.0),
            ],
        )
    with database.session() as session:
        reader = SessionReader(session)
        bucketed = gpu_history(reader, since_ms=base, until_ms=base + 120_000, bucket_s=60)
        by_uuid = gpu_history(
            reader, since_ms=base, until_ms=base + 120_000, bucket_s=60, gpu="GPU-alpha-1"
        )
        by_host_idx = gpu_history(
            reader, since_ms=base, until_ms=base + 120_000, bucket_s=60, gpu="alpha:1"
        )
        raw_limited = gpu_history(reader, since_ms=base, until_ms=base + 120_000, limit=2)
        other_host = gpu_history(reader, since_ms=base, until_ms=base + 120_000, host="beta")
        with pytest.raises(ValueError, match="positive"):
            gpu_history(reader, since_ms=0, until_ms=1, bucket_s=0)
    assert bucketed == [
        _point(a0, "alpha", 0, base, 3, util_avg=30.0, util_max=60.0, mem_used_avg=200.0,
               mem_used_max=300, temp_avg=60.0, temp_max=70.0, power_avg=100.0, power_max=100.0),
        _point(a1, "alpha", 1, base, 1, util_avg=40.0, util_max=40.0),
        _point(a0, "alpha", 0, base + 60_000, 1, util_avg=5.0, util_max=5.0, mem_used_avg=50.0,
               mem_used_max=50, power_avg=250.5, power_max=250.5),
    ]  # fmt: skip
    assert by_uuid == by_host_idx == [bucketed[1]]
    assert [(p.gpu_id, p.ts_ms, p.samples, p.util_avg) for p in raw_limited] == [
        (a0, base, 1, 10.0),
        (a1, base + 1_000, 1, 40.0),
    ]
    assert other_host == []


def test_prune_samples_deletes_only_older(database: Database, seeded: SeededFleet) -> None:
    a0 = seeded.gpu_ids[("alpha", 0)]
    with database.sessionmaker() as session:
        record_samples(
            session,
            [HostSampleIn(seeded.host_ids["alpha"], 10)],
            [GpuSampleIn(a0, 10), GpuSampleIn(a0, 20)],
        )
    with database.session() as session:
        reader = SessionReader(session)
        assert prune_samples(session, older_than_ms=15) == (1, 1)
        assert [p.ts_ms for p in gpu_history(reader, since_ms=0, until_ms=100)] == [20]


@pytest.mark.sqlite_only
def test_record_samples_throughput(database: Database, seeded: SeededFleet, db_path: Path) -> None:
    """Prints GPU samples/s (50k in one call, in 1k batches, and bare sqlite3); not asserted."""
    gpu_ids = list(seeded.gpu_ids.values())

    def samples(ts_offset: int) -> list[GpuSampleIn]:
        return [
            GpuSampleIn(gpu_ids[n % len(gpu_ids)], ts_offset + 1_000 * n, 50.0, 20.0, 10**9,
                        60.0, 250.5, 30.0, 0, 1500, 5000, 0, 1, False)
            for n in range(50_000)
        ]  # fmt: skip

    one_call_samples = samples(0)
    started = time.perf_counter()
    with database.sessionmaker() as session:
        record_samples(session, [], one_call_samples)
    one_call = 50_000 / (time.perf_counter() - started)

    batched_samples = samples(10**8)
    started = time.perf_counter()
    for offset in range(0, 50_000, 1_000):
        with database.sessionmaker() as session:
            record_samples(session, [], batched_samples[offset : offset + 1_000])
    batched = 50_000 / (time.perf_counter() - started)

    bare_rows = [astuple(sample) for sample in samples(2 * 10**8)]
    columns = ", ".join(f.name for f in fields(GpuSampleIn))
    marks = ", ".join("?" * len(fields(GpuSampleIn)))
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("PRAGMA foreign_keys = ON")
        started = time.perf_counter()
        connection.execute("BEGIN")
        connection.executemany(f"INSERT INTO gpu_samples ({columns}) VALUES ({marks})", bare_rows)
        connection.execute("COMMIT")
        bare = 50_000 / (time.perf_counter() - started)
    finally:
        connection.close()
    print(
        f"\nrecord_samples: {one_call:,.0f} GPU samples/s in one call, {batched:,.0f}/s in 1k "
        f"batches; bare sqlite3 executemany: {bare:,.0f}/s"
    )
    with database.session() as session:
        reader = SessionReader(session)
        stored = gpu_history(reader, since_ms=0, until_ms=10**12, bucket_s=10**6)
    assert sum(point.samples for point in stored) == 150_000
