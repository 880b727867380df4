"""The views migration 0015 recreates, on both backends: usage_daily counts each rolled-up
minute for the part of it held and agrees with `fleet usage` on the same history;
gpu_utilisation_hourly weighs each minute's mean by the samples that had the reading, as
`fleet history gpus --bucket 1h` does. Downgrading restores 0008's and 0004's views."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

import pytest
from alembic import command
from sqlalchemy import text

from db.engine import Database, open_database
from db.migrate import alembic_config
from db.models import Allocation, GpuSampleMinute, Task
from db.retention import rollup_gpu_minutes
from db.rollup_history import gpu_history_with_rollups
from db.samples import record_samples
from db.sql import SessionReader
from db.types import GpuSampleIn
from fleet.context import FleetContext
from fleet.services.usage import UsageService
from fleet.ssh.options import SshOptions
from tests.db.conftest import SeededFleet

T = 1_700_000_040  # a whole minute, epoch seconds
HOUR_MS = 3_600_000


def _daily(database: Database) -> dict[tuple[str, str], tuple[float, float]]:
    """(owner, kind) → (gpu_seconds, busy_gpu_seconds) summed over the days of usage_daily."""
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    with database.engine.connect() as connection:
        for owner, kind, held, busy in connection.execute(text(
                "SELECT owner, kind, gpu_seconds, busy_gpu_seconds FROM usage_daily")):
            totals[(owner, kind)][0] += float(held)
            totals[(owner, kind)][1] += float(busy)
    return {key: (held, busy) for key, (held, busy) in totals.items()}


def _store_minute(database: Database, gpu_id: int, minute_s: int) -> None:
    """The GPU 100 % busy all that minute (60 samples), rolled up."""
    with database.session() as session:
        record_samples(session, [], [GpuSampleIn(gpu_id, (minute_s + i) * 1000,
                                                 utilization_gpu_pct=100.0) for i in range(60)])
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=(minute_s + 120) * 1000)


def test_usage_daily_counts_the_part_of_a_minute_held(database: Database,
                                                      seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    _store_minute(database, gpu_id, T)
    with database.session() as session:  # held 5 s, from 10 s into the minute
        session.add(Allocation(gpu_id=gpu_id, kind="reservation", owner="zed",
                               created_at=T + 10, released_at=T + 15))
    held, busy = _daily(database)[("zed", "reservation")]
    assert held == 5 and busy == pytest.approx(5.0)  # 0008's view: 0


async def test_usage_daily_agrees_with_fleet_usage(database: Database,
                                                   seeded: SeededFleet) -> None:
    """Random holdings (tasks that ended before their release, reservations expired and not
    released or released late, partial minutes, several days) over rolled-up minutes of
    random utilisation: per owner and kind, the view's sums equal `fleet usage`'s over a
    window holding all of them."""
    rng = random.Random(15)
    gpus = sorted(seeded.gpu_ids.values())
    first, last = T - 2 * 86400, T + 86400
    owners = ("ann", "bob", "cy")
    with database.session() as session:
        session.add_all(GpuSampleMinute(gpu_id=gpu_id, bucket_ts=minute * 1000, samples=1,
                                        util_avg=rng.choice([None, 0.0, 12.5, 50.0, 100.0]))
                        for gpu_id in gpus for minute in range(first, last, 60))
        task_id = 0
        for gpu_id in gpus:
            moment = first + rng.randrange(600)
            held: list[Allocation] = []
            while moment < last - 7200:
                created = moment
                length = rng.randrange(1, 5 * 3600)
                owner = rng.choice(owners)
                if rng.random() < 0.5:  # a task, its end noticed up to an hour later
                    task_id += 1
                    session.add(Task(id=task_id, name="t", script="t.py", args_json="[]",
                                     state="succeeded", gpus_requested=1, constraints_json="{}",
                                     priority=0, owner=owner, submitted_at=created,
                                     started_at=created, ended_at=created + length))
                    session.flush()
                    held.append(Allocation(gpu_id=gpu_id, task_id=task_id, kind="task",
                                           owner=owner, created_at=created,
                                           released_at=created + length + rng.randrange(3600)))
                else:  # a reservation, --for it, released early, late, or not at all
                    expires = created + length if rng.random() < 0.7 else None
                    released = rng.choice([None, created + rng.randrange(1, 2 * length)])
                    if released is None and expires is None:
                        released = created + length
                    held.append(Allocation(gpu_id=gpu_id, kind="reservation", owner=owner,
                                           created_at=created, expires_at=expires,
                                           released_at=released))
                    length = max(length, (released or created) - created)
                moment = created + length + rng.randrange(1, 3600)
            for allocation, after in itertools.pairwise(held):
                if allocation.released_at is None:  # the next claim expired it (before 0015:
                    allocation.released_at = after.created_at  # at that claim's time)
            session.add_all(held)
    service = UsageService(FleetContext(database, lambda: pytest.fail("inventory read"),
                                        SshOptions(), clock=lambda: last + 86400))
    report = await service.usage(since=first - 86400, until=last + 86400)
    daily = _daily(database)
    assert {owner for owner, _ in daily} == {row.key for row in report.rows} == set(owners)
    for row in report.rows:
        task_held, task_busy = daily.get((row.key, "task"), (0.0, 0.0))
        reserved, reserved_busy = daily.get((row.key, "reservation"), (0.0, 0.0))
        assert row.task_gpu_hours * 3600 == pytest.approx(task_held)
        assert row.reserved_gpu_hours * 3600 == pytest.approx(reserved)
        assert row.reserved_busy_gpu_hours * 3600 == pytest.approx(reserved_busy)
        assert (row.busy_gpu_hours - row.reserved_busy_gpu_hours) * 3600 == pytest.approx(
            task_busy)
        assert 0 < row.busy_gpu_hours < row.gpu_hours


def test_hourly_view_weighs_each_reading_by_the_samples_that_had_it(
        database: Database, seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    base = T // 3600 * 3600 * 1000
    with database.session() as session:  # minute 0: 100 W, then unreadable; minute 1: 200 W x2
        record_samples(session, [], [
            GpuSampleIn(gpu_id, base, utilization_gpu_pct=10.0, power_draw_w=100.0,
                        temperature_c=None),
            GpuSampleIn(gpu_id, base + 1000, utilization_gpu_pct=None, power_draw_w=None,
                        temperature_c=40.0),
            GpuSampleIn(gpu_id, base + 60_000, utilization_gpu_pct=40.0, power_draw_w=200.0,
                        temperature_c=70.0),
            GpuSampleIn(gpu_id, base + 61_000, utilization_gpu_pct=40.0, power_draw_w=200.0,
                        temperature_c=70.0)])
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=base + HOUR_MS)
    with database.engine.connect() as connection:
        (row,) = connection.execute(text(
            "SELECT samples, util_avg, temp_avg, power_avg FROM gpu_utilisation_hourly")).all()
    samples, util, temp, power = row
    assert samples == 4
    assert (util, temp, power) == (pytest.approx((10 + 40 + 40) / 3),
                                   pytest.approx((40 + 70 + 70) / 3),
                                   pytest.approx((100 + 200 + 200) / 3))  # 0004's: 150 W
    with database.session() as session:  # what `fleet history gpus --bucket 1h` says
        (point,) = gpu_history_with_rollups(SessionReader(session), since_ms=base,
                                            until_ms=base + HOUR_MS, bucket_s=3600)
    assert [point.util_avg, point.temp_avg, point.power_avg] == pytest.approx(
        [util, temp, power])


def test_hourly_view_weighs_a_minute_from_before_0013_by_its_samples(
        database: Database, seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    base = T // 3600 * 3600 * 1000
    with database.session() as session:  # no per-reading counts: the minute's samples weigh
        session.add_all([
            GpuSampleMinute(gpu_id=gpu_id, bucket_ts=base, samples=3, util_avg=70.0,
                            power_avg=300.0),
            GpuSampleMinute(gpu_id=gpu_id, bucket_ts=base + 60_000, samples=2, util_avg=20.0,
                            power_avg=None, util_samples=1, power_samples=0)])
    with database.engine.connect() as connection:
        (row,) = connection.execute(text(
            "SELECT samples, util_avg, power_avg FROM gpu_utilisation_hourly")).all()
    assert tuple(row) == (5, pytest.approx((3 * 70 + 20) / 4), pytest.approx(300.0))


def test_downgrade_restores_the_old_views_and_upgrade_fixes_them(
        db_url: str, database: Database, seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    _store_minute(database, gpu_id, T)
    with database.session() as session:
        session.add(Allocation(gpu_id=gpu_id, kind="reservation", owner="zed",
                               created_at=T, released_at=T + 5))
    database.close()
    config = alembic_config(db_url)
    command.downgrade(config, "0014")
    with open_database(db_url, migrate=False) as old:
        assert _daily(old)[("zed", "reservation")] == pytest.approx((5, 60.0))
        with old.engine.connect() as connection:
            assert connection.scalar(text(
                "SELECT COUNT(*) FROM gpu_utilisation_hourly")) == 1
    command.upgrade(config, "head")
    with open_database(db_url) as upgraded:
        assert _daily(upgraded)[("zed", "reservation")] == pytest.approx((5, 5.0))
