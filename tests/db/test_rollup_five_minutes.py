"""5-minute rollups: summed from the minutes exactly, read by long buckets, pruned, migrated.

The samples and the comparison are test_rollup_history's: 40 minutes at 5 s of two GPUs with
NULL readings inside minutes, a minute without temperature and a GPU without utilisation.
"""

from __future__ import annotations

import itertools

import pytest
from alembic import command
from sqlalchemy import delete, event, func, select, text

from db.engine import Database, open_database
from db.history import gpu_history
from db.migrate import alembic_config
from db.models import GpuSample, GpuSampleFiveMinutes, GpuSampleMinute
from db.retention import (
    FIVE_MINUTE_BACKFILL_MS,
    FIVE_MINUTES_MS,
    MINUTE_MS,
    prune_samples_and_rollups,
    rollup_gpu_five_minutes,
    rollup_gpu_minutes,
)
from db.rollup_history import gpu_history_with_rollups
from db.sql import SessionReader
from tests.db.conftest import SeededFleet
from tests.db.test_rollup_history import BASE_MS, LEGACY_ROLLUP, _assert_same, _store

PERIOD_COLUMNS = ("gpu_id", "bucket_ts", "samples", "util_avg", "util_max", "util_samples",
                  "mem_used_avg", "mem_used_max", "mem_used_samples", "temp_avg", "temp_max",
                  "temp_samples", "power_avg", "power_max", "power_samples")


def _periods(database: Database) -> list[tuple[object, ...]]:
    with database.session() as session:
        return [tuple(row) for row in session.execute(
            select(*(getattr(GpuSampleFiveMinutes, name) for name in PERIOD_COLUMNS))
            .order_by(GpuSampleFiveMinutes.bucket_ts, GpuSampleFiveMinutes.gpu_id))]


@pytest.fixture(params=["periods behind the minutes", "periods caught up",
                        "periods start late"])
def layered(request: pytest.FixtureRequest, database: Database, seeded: SeededFleet) -> Database:
    """Minutes rolled up to 23 minutes in; periods to 10 minutes (rolled when the minutes
    reached 12.5), or to 20 (rolled again after), or from 10 to 20 only (as after migration
    0014 on minutes older than its backfill)."""
    _store(database, seeded)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 12 * MINUTE_MS + 30_000)
        assert rollup_gpu_five_minutes(session).end_ms == BASE_MS + 10 * MINUTE_MS
        rollup_gpu_minutes(session, until_ms=BASE_MS + 23 * MINUTE_MS + 30_000)
        if request.param != "periods behind the minutes":
            assert rollup_gpu_five_minutes(session).end_ms == BASE_MS + 20 * MINUTE_MS
        if request.param == "periods start late":
            session.execute(delete(GpuSampleFiveMinutes).where(
                GpuSampleFiveMinutes.bucket_ts < BASE_MS + 10 * MINUTE_MS))
    return database


RANGES_MIN = ((0, 40), (0, 10), (2.5, 31.25), (5, 20), (12, 17), (-10, 40), (21, 40))


def test_history_over_both_levels_equals_raw(layered: Database) -> None:
    """Every bucket width (2 minutes: minutes only), range, GPU filter and limit in one
    database (its set-up is the cost); a limit counts points across the levels and raw."""
    compared = 0
    with layered.session() as session:
        reader = SessionReader(session)
        for bucket_s, (since_min, until_min), gpu, limit in itertools.product(
                (60, 120, 300, 600, 900, 3600), RANGES_MIN, (None, "alpha:0", "GPU-beta-0"),
                (None, 2)):
            query = {"since_ms": BASE_MS + int(since_min * MINUTE_MS),
                     "until_ms": BASE_MS + int(until_min * MINUTE_MS), "gpu": gpu,
                     "bucket_s": bucket_s, "limit": limit}
            raw = gpu_history(reader, **query)
            assert raw, query
            try:
                _assert_same(gpu_history_with_rollups(reader, **query), raw)
            except AssertionError as exc:
                raise AssertionError(f"{query}: {exc}") from exc
            compared += 1
    assert compared == 6 * len(RANGES_MIN) * 3 * 2


def test_whole_periods_are_read_from_the_five_minute_rollups(
    database: Database, seeded: SeededFleet
) -> None:
    _store(database, seeded)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 23 * MINUTE_MS + 30_000)
        rollup_gpu_five_minutes(session)
    until_ms = BASE_MS + 40 * MINUTE_MS
    with database.session() as session:
        reader = SessionReader(session)
        before = gpu_history(reader, since_ms=BASE_MS, until_ms=until_ms, bucket_s=300)
    levels: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        levels.extend(name for name in ("gpu_samples_5m", "gpu_samples_1m ")
                      if f"FROM {name}" in statement and "sum(" in statement.lower())

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        with database.session() as session:
            reader = SessionReader(session)
            after = gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=until_ms,
                                             bucket_s=300)
    finally:
        event.remove(database.engine, "before_cursor_execute", record)
    _assert_same(after, before)
    assert levels == ["gpu_samples_5m"]  # [0, 20) from periods, [20, 40) from raw
    # Without the minutes and the raw samples of the first 20 minutes, the same points come
    # back: they were read from the periods.
    with database.session() as session:
        session.execute(delete(GpuSampleMinute).where(
            GpuSampleMinute.bucket_ts < BASE_MS + 20 * MINUTE_MS))
        session.execute(delete(GpuSample).where(GpuSample.ts < BASE_MS + 20 * MINUTE_MS))
    with database.session() as session:
        reader = SessionReader(session)
        pruned = gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=until_ms,
                                          bucket_s=300)
    _assert_same(pruned, before)


def test_five_minute_rollup_is_exact_and_idempotent(
    database: Database, seeded: SeededFleet
) -> None:
    _store(database, seeded)
    with database.session() as session:
        assert rollup_gpu_five_minutes(session).buckets == 0  # no minutes yet
        rollup_gpu_minutes(session, until_ms=BASE_MS + 17 * MINUTE_MS)
        first = rollup_gpu_five_minutes(session)
    assert (first.buckets, first.start_ms, first.end_ms) == (
        3 * 2, BASE_MS, BASE_MS + 3 * FIVE_MINUTES_MS)  # minutes 15 and 16 wait for 17-19
    with database.session() as session:
        reader = SessionReader(session)
        raw = gpu_history(reader, since_ms=BASE_MS, until_ms=BASE_MS + 15 * MINUTE_MS,
                          bucket_s=300)
    periods = _periods(database)
    assert [(row[0], row[1], row[2]) for row in periods] == [
        (point.gpu_id, point.ts_ms, point.samples) for point in raw]
    for row, point in zip(periods, raw, strict=True):
        values = dict(zip(PERIOD_COLUMNS, row, strict=True))
        assert (values["util_max"], values["mem_used_max"], values["temp_max"],
                values["power_max"]) == (point.util_max, point.mem_used_max, point.temp_max,
                                         point.power_max)
        for reading, mean in (("util", point.util_avg), ("mem_used", point.mem_used_avg),
                              ("temp", point.temp_avg), ("power", point.power_avg)):
            assert (values[f"{reading}_avg"] is None) == (mean is None)
            if mean is not None:
                assert values[f"{reading}_avg"] == pytest.approx(mean, rel=1e-9)
    beta = [dict(zip(PERIOD_COLUMNS, row, strict=True)) for row in periods
            if row[0] == seeded.gpu_ids[("beta", 0)]]
    assert [row["util_samples"] for row in beta] == [0, 0, 0]  # never reports utilisation
    assert beta[2]["temp_samples"] == 60 - 12  # minute 13 has no temperature
    with database.session() as session:
        assert rollup_gpu_five_minutes(session).buckets == 0
    assert _periods(database) == periods


def test_the_first_period_pass_reaches_back_a_week(database: Database, seeded: SeededFleet) -> None:
    """Minutes from before the periods existed: older than FIVE_MINUTE_BACKFILL_MS, they stay
    minutes (the history reads them there); the migration fills the same week."""
    gpu = seeded.gpu_ids[("alpha", 0)]
    newest = BASE_MS + 8 * 86_400_000
    minutes = [BASE_MS + offset for offset in range(0, 10 * MINUTE_MS, MINUTE_MS)]
    minutes += [newest - offset for offset in range(0, 10 * MINUTE_MS, MINUTE_MS)]
    with database.session() as session:
        session.add_all(GpuSampleMinute(gpu_id=gpu, bucket_ts=ts, samples=12, util_avg=50.0,
                                        util_max=60.0, util_samples=12) for ts in minutes)
        session.flush()
        result = rollup_gpu_five_minutes(session)
    end_ms = (newest + MINUTE_MS) // FIVE_MINUTES_MS * FIVE_MINUTES_MS
    assert (result.start_ms, result.end_ms) == (end_ms - FIVE_MINUTE_BACKFILL_MS, end_ms)
    assert [row[1] for row in _periods(database)] == [end_ms - 2 * FIVE_MINUTES_MS,
                                                      end_ms - FIVE_MINUTES_MS]
    with database.session() as session:
        reader = SessionReader(session)
        old = gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=end_ms, gpu="alpha:0",
                                       bucket_s=300)
    assert [(point.ts_ms, point.samples) for point in old] == [
        (BASE_MS, 60), (BASE_MS + FIVE_MINUTES_MS, 60),  # from the minutes
        (end_ms - 2 * FIVE_MINUTES_MS, 12 * 4), (end_ms - FIVE_MINUTES_MS, 60)]


def test_periods_of_legacy_minutes_weigh_their_sample_counts(
    database: Database, seeded: SeededFleet
) -> None:
    """Minutes from before migration 0013 (no counts) read the same through their periods."""
    _store(database, seeded)
    with database.session() as session:
        reader = SessionReader(session)
        session.execute(text(LEGACY_ROLLUP))
        minutes_only = gpu_history_with_rollups(
            reader, since_ms=BASE_MS, until_ms=BASE_MS + 40 * MINUTE_MS, bucket_s=900)
        assert rollup_gpu_five_minutes(session).buckets == 8 * 2
        both = gpu_history_with_rollups(
            reader, since_ms=BASE_MS, until_ms=BASE_MS + 40 * MINUTE_MS, bucket_s=900)
    _assert_same(both, minutes_only)


def test_prune_takes_the_period_holding_the_cutoff(database: Database, seeded: SeededFleet) -> None:
    """The minutes left of a period whose first minutes are pruned answer its bucket, so the
    history over the same range counts the same samples at every width."""
    _store(database, seeded)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 40 * MINUTE_MS)
        rollup_gpu_five_minutes(session)
        session.execute(delete(GpuSample))  # raw pruned too: the rollups are all there is
        pruned = prune_samples_and_rollups(session, raw_before_ms=BASE_MS,
                                           rollup_before_ms=BASE_MS + 12 * MINUTE_MS)
    assert (pruned.gpu_rollups, pruned.gpu_rollups_5m) == (12 * 2, 3 * 2)
    assert {row[1] - BASE_MS for row in _periods(database)} == {
        minute * MINUTE_MS for minute in range(15, 40, 5)}
    totals = set()
    with database.session() as session:
        reader = SessionReader(session)
        for bucket_s in (60, 300, 900, 1200):
            points = gpu_history_with_rollups(reader, since_ms=BASE_MS,
                                              until_ms=BASE_MS + 40 * MINUTE_MS, gpu="alpha:0",
                                              bucket_s=bucket_s)
            totals.add(sum(point.samples for point in points))
    assert totals == {(40 - 12) * 12}


def test_migration_0014_fills_the_whole_periods_of_the_minutes(
    db_url: str, database: Database, seeded: SeededFleet
) -> None:
    _store(database, seeded)
    week_before = BASE_MS - FIVE_MINUTE_BACKFILL_MS - FIVE_MINUTES_MS
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 23 * MINUTE_MS)
        session.add(GpuSampleMinute(gpu_id=seeded.gpu_ids[("alpha", 0)], bucket_ts=week_before,
                                    samples=12, util_avg=1.0, util_max=1.0, util_samples=12))
        session.flush()
        rollup_gpu_five_minutes(session)
    expected = _periods(database)
    assert len(expected) == 4 * 2  # not the minute from before the week
    database.close()
    config = alembic_config(db_url)
    command.downgrade(config, "0013")
    command.upgrade(config, "head")
    with open_database(db_url) as upgraded:
        filled = _periods(upgraded)
        with upgraded.session() as session:
            assert session.scalar(select(func.count()).select_from(GpuSampleMinute)) == 23 * 2 + 1
    assert [row[:3] for row in filled] == [row[:3] for row in expected]
    for got, want in zip(filled, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("gpu", ["nosuch:0", "alpha:7", "GPU-nosuch"])
def test_a_filter_naming_no_gpu_gives_no_points(layered: Database, gpu: str) -> None:
    until_ms = BASE_MS + 40 * MINUTE_MS
    with layered.session() as session:
        reader = SessionReader(session)
        assert gpu_history_with_rollups(reader, since_ms=BASE_MS, until_ms=until_ms, gpu=gpu,
                                        bucket_s=300) == []
        assert gpu_history(reader, since_ms=BASE_MS, until_ms=until_ms, gpu=gpu,
                           bucket_s=300) == []
