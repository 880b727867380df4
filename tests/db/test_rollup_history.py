"""History from rollups: the same points as the raw computation, around the watermark too.

"The same": host, GPU, bucket start, sample count and every maximum exactly; each mean within
a relative 1e-9 (a mean of per-minute means weighted by counts is rounded differently from
one mean over the raw samples, in the last bits).
"""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import delete, event, func, select, text

from db.engine import Database, open_database
from db.history import gpu_history
from db.migrate import alembic_config
from db.models import GpuSample, GpuSampleMinute
from db.retention import MINUTE_MS, rollup_gpu_minutes
from db.rollup_history import gpu_history_with_rollups
from db.samples import record_samples
from db.sql import SessionReader
from db.types import GpuHistoryPoint, GpuSampleIn
from tests.db.conftest import SeededFleet

BASE_MS = 1_700_000_100_000  # a 5-minute boundary
STEP_MS = 5_000
MINUTES = 40
MEANS = ("util_avg", "mem_used_avg", "temp_avg", "power_avg")
EXACT = ("host", "gpu_idx", "uuid", "gpu_id", "ts_ms", "samples", "util_max", "mem_used_max",
         "temp_max", "power_max")


def _store(database: Database, seeded: SeededFleet) -> None:
    """40 minutes at 5 s for alpha:0 and beta:0, with NULL readings inside some minutes
    (every 7th power reading), whole minutes without one (temperature in minute 13) and a GPU
    that never reports utilisation (beta:0)."""
    samples = []
    for step in range(MINUTES * MINUTE_MS // STEP_MS):
        ts = BASE_MS + step * STEP_MS
        minute = step * STEP_MS // MINUTE_MS
        for gpu, offset in ((seeded.gpu_ids[("alpha", 0)], 0), (seeded.gpu_ids[("beta", 0)], 3)):
            samples.append(GpuSampleIn(
                gpu, ts,
                utilization_gpu_pct=None if offset else (step * 37 % 101) / 3,
                memory_used_bytes=(step * 7919 + offset) % 81 * 1_073_741_823,
                temperature_c=None if minute == 13 else 30.1 + (step + offset) % 53 / 7,
                power_draw_w=None if step % 7 == 0 else 100.0 + (step * 13 + offset) % 601 / 9))
    with database.session() as session:
        record_samples(session, [], samples)


def _assert_same(rolled: list[GpuHistoryPoint], raw: list[GpuHistoryPoint]) -> None:
    assert [[getattr(p, name) for name in EXACT] for p in rolled] == [
        [getattr(p, name) for name in EXACT] for p in raw]
    for got, want in zip(rolled, raw, strict=True):
        for name in MEANS:
            expected = getattr(want, name)
            actual = getattr(got, name)
            assert (actual is None) == (expected is None), (name, got, want)
            if expected is not None:
                assert actual == pytest.approx(expected, rel=1e-9), (name, got, want)


@pytest.fixture
def rolled(database: Database, seeded: SeededFleet) -> Database:
    """The samples, rolled up to 23 minutes in (the watermark cuts a 5-minute bucket)."""
    _store(database, seeded)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 23 * MINUTE_MS + 30_000)
    return database


@pytest.mark.parametrize("bucket_s", [60, 300, 3600])
@pytest.mark.parametrize(("since_min", "until_min"), [
    (0, 40),        # the whole range: watermark inside it
    (0, 20),        # ends before the watermark
    (7.5, 31.25),   # cut buckets at both ends
    (21, 23),       # inside one 5-minute bucket that the watermark does not reach
    (22, 40),       # starts in the bucket holding the watermark
    (25, 40),       # after the watermark: raw only
    (-10, 40),      # starts before the first sample
])
@pytest.mark.parametrize("gpu", [None, "alpha:0", "GPU-beta-0"])
def test_rollup_history_equals_raw_history(
    rolled: Database, bucket_s: int, since_min: float, until_min: float, gpu: str | None
) -> None:
    since_ms = BASE_MS + int(since_min * MINUTE_MS)
    until_ms = BASE_MS + int(until_min * MINUTE_MS)
    with rolled.session() as session:
        reader = SessionReader(session)
        raw = gpu_history(reader, since_ms=since_ms, until_ms=until_ms, gpu=gpu,
                          bucket_s=bucket_s)
        from_rollups = gpu_history_with_rollups(reader, since_ms=since_ms, until_ms=until_ms,
                                                gpu=gpu, bucket_s=bucket_s)
    assert raw
    _assert_same(from_rollups, raw)


@pytest.mark.parametrize("host", ["alpha", "beta"])
def test_one_hosts_history_from_rollups_equals_raw(rolled: Database, host: str) -> None:
    since_ms, until_ms = BASE_MS + 90_000, BASE_MS + 40 * MINUTE_MS
    with rolled.session() as session:
        reader = SessionReader(session)
        raw = gpu_history(reader, since_ms=since_ms, until_ms=until_ms, host=host, bucket_s=300)
        from_rollups = gpu_history_with_rollups(reader, since_ms=since_ms, until_ms=until_ms,
                                                host=host, bucket_s=300)
    assert raw and {p.host for p in raw} == {host}
    _assert_same(from_rollups, raw)


@pytest.mark.parametrize("limit", [1, 5, 9, 100])
def test_limit_counts_points_across_rollups_and_raw(rolled: Database, limit: int) -> None:
    since_ms, until_ms = BASE_MS + 2 * MINUTE_MS + 1, BASE_MS + 40 * MINUTE_MS
    with rolled.session() as session:
        reader = SessionReader(session)
        raw = gpu_history(reader, since_ms=since_ms, until_ms=until_ms, bucket_s=300,
                          limit=limit)
        from_rollups = gpu_history_with_rollups(reader, since_ms=since_ms, until_ms=until_ms,
                                                bucket_s=300, limit=limit)
    _assert_same(from_rollups, raw)


def test_rolled_minutes_are_read_from_rollups_and_only_the_tail_from_raw(
    rolled: Database,
) -> None:
    watermark = BASE_MS + 23 * MINUTE_MS
    until_ms = BASE_MS + 40 * MINUTE_MS
    with rolled.session() as session:
        reader = SessionReader(session)
        before = gpu_history(reader, since_ms=BASE_MS, until_ms=until_ms, gpu="alpha:0",
                             bucket_s=300)
    raw_reads: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "FROM gpu_samples " in statement and "count(" in statement.lower():
            raw_reads.append(statement)

    event.listen(rolled.engine, "before_cursor_execute", record)
    try:
        with rolled.session() as session:
            reader = SessionReader(session)
            after = gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=until_ms,
                                             gpu="alpha:0", bucket_s=300)
    finally:
        event.remove(rolled.engine, "before_cursor_execute", record)
    _assert_same(after, before)
    assert len(raw_reads) == 1  # one bucketed raw query: the tail from the watermark's bucket
    # Raw samples of the rolled-up minutes removed: the same points still come back, so they
    # were read from the rollups (the tail from 20 minutes on still has its raw samples).
    with rolled.session() as session:
        session.execute(delete(GpuSample).where(GpuSample.ts < BASE_MS + 20 * MINUTE_MS))
        assert session.scalar(select(func.max(GpuSampleMinute.bucket_ts))) == watermark - MINUTE_MS
    with rolled.session() as session:
        reader = SessionReader(session)
        pruned = gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=until_ms,
                                          gpu="alpha:0", bucket_s=300)
    _assert_same(pruned, before)


LEGACY_ROLLUP = """
INSERT INTO gpu_samples_1m (gpu_id, bucket_ts, samples, util_avg, util_max, mem_used_max,
    temp_avg, temp_max, power_avg, power_max)
SELECT gpu_id, ts / 60000 * 60000, count(*), avg(utilization_gpu_pct), max(utilization_gpu_pct),
    max(memory_used_bytes), avg(temperature_c), max(temperature_c), avg(power_draw_w),
    max(power_draw_w)
FROM gpu_samples GROUP BY gpu_id, ts / 60000 * 60000
"""


def test_migration_0013_fills_the_minutes_whose_raw_samples_are_all_there(
    db_url: str, database: Database, seeded: SeededFleet
) -> None:
    a0 = seeded.gpu_ids[("alpha", 0)]
    samples = [GpuSampleIn(a0, BASE_MS + step * STEP_MS, utilization_gpu_pct=float(step),
                           memory_used_bytes=step << 20,
                           power_draw_w=None if step % 5 == 0 else 200.0)
               for step in range(3 * MINUTE_MS // STEP_MS)]
    with database.session() as session:
        record_samples(session, [], samples)
    database.close()
    config = alembic_config(db_url)
    command.downgrade(config, "0012")
    with open_database(db_url, migrate=False) as old, old.engine.begin() as connection:
        connection.execute(text(LEGACY_ROLLUP))
        # Minute 0 loses its first raw samples (pruned mid-minute): it cannot be filled in.
        connection.execute(text("DELETE FROM gpu_samples WHERE ts < :cut"),
                           {"cut": BASE_MS + 20_000})
    command.upgrade(config, "head")
    with open_database(db_url) as upgraded, upgraded.session() as session:
        rows = session.execute(select(
            GpuSampleMinute.bucket_ts, GpuSampleMinute.samples, GpuSampleMinute.util_samples,
            GpuSampleMinute.mem_used_samples, GpuSampleMinute.temp_samples,
            GpuSampleMinute.power_samples, GpuSampleMinute.mem_used_avg,
        ).order_by(GpuSampleMinute.bucket_ts)).all()
    assert [tuple(row[:6]) for row in rows] == [
        (BASE_MS, 12, None, None, None, None),
        (BASE_MS + MINUTE_MS, 12, 12, 12, 0, 12 - 2),  # steps 15 and 20 have no power
        (BASE_MS + 2 * MINUTE_MS, 12, 12, 12, 0, 12 - 3),  # nor 25, 30 and 35
    ]
    assert rows[0].mem_used_avg is None
    assert rows[1].mem_used_avg == pytest.approx(sum(range(12, 24)) / 12 * (1 << 20), rel=1e-12)
