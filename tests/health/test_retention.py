"""Rollup of raw GPU samples into 1-minute buckets (idempotent, counted) and pruning."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from db.engine import Database
from db.models import GpuSample, GpuSampleMinute, HostSample
from db.retention import MINUTE_MS, prune_samples_and_rollups, rollup_gpu_minutes
from db.samples import record_samples
from db.types import GpuSampleIn, HostSampleIn
from fleet.health.retention import RetentionSettings, apply_retention
from tests.health.conftest import Seeded

BASE_MS = 1_700_000_040_000  # a minute boundary


def _store(database: Database, seeded: Seeded, start_ms: int, minutes: int) -> None:
    """Every 10 s: GPU alpha:0 at util 10..., alpha:1 with util None; one host sample."""
    host_samples = []
    gpu_samples = []
    for step in range(minutes * 6):
        ts = start_ms + step * 10_000
        gpu_samples.append(GpuSampleIn(seeded.gpu_ids[("alpha", 0)], ts,
                                       utilization_gpu_pct=float(step % 6 * 10),
                                       temperature_c=50.0 + step % 6, power_draw_w=100.0,
                                       memory_used_bytes=step * 1000))
        gpu_samples.append(GpuSampleIn(seeded.gpu_ids[("alpha", 1)], ts, temperature_c=40.0))
        host_samples.append(HostSampleIn(seeded.host_ids["alpha"], ts, load_1m=1.0))
    with database.session() as session:
        record_samples(session, host_samples, gpu_samples)


def _rollups(database: Database) -> list[tuple[int, int, int, float | None, float | None]]:
    with database.session() as session:
        return [tuple(row) for row in session.execute(  # type: ignore[misc]
            select(GpuSampleMinute.gpu_id, GpuSampleMinute.bucket_ts, GpuSampleMinute.samples,
                   GpuSampleMinute.util_avg, GpuSampleMinute.temp_max)
            .order_by(GpuSampleMinute.bucket_ts, GpuSampleMinute.gpu_id))]


def test_rollup_is_exact_and_idempotent(database: Database, seeded: Seeded) -> None:
    _store(database, seeded, BASE_MS, minutes=5)
    gpu0 = seeded.gpu_ids[("alpha", 0)]
    # Up to 2.5 minutes in: only the two complete minutes are rolled up.
    with database.session() as session:
        first = rollup_gpu_minutes(session, until_ms=BASE_MS + 150_000)
    assert (first.buckets, first.start_ms, first.end_ms) == (4, BASE_MS, BASE_MS + 2 * MINUTE_MS)
    rows = _rollups(database)
    assert [(r[1] - BASE_MS, r[2]) for r in rows] == [(0, 6), (0, 6), (60_000, 6), (60_000, 6)]
    by_gpu = {(r[0], r[1]): r for r in rows}
    assert by_gpu[(gpu0, BASE_MS)][3] == 25.0  # avg of 0,10,...,50
    assert by_gpu[(gpu0, BASE_MS)][4] == 55.0
    assert by_gpu[(seeded.gpu_ids[("alpha", 1)], BASE_MS)][3] is None
    # Same range again: nothing added, nothing double counted.
    with database.session() as session:
        again = rollup_gpu_minutes(session, until_ms=BASE_MS + 150_000)
    assert again.buckets == 0
    assert _rollups(database) == rows
    # Later: only the new complete minutes.
    with database.session() as session:
        later = rollup_gpu_minutes(session, until_ms=BASE_MS + 10 * MINUTE_MS)
    assert later.buckets == 6
    with database.session() as session:
        total = session.scalar(select(func.sum(GpuSampleMinute.samples)))
        raw = session.scalar(select(func.count()).select_from(GpuSample))
    assert total == raw == 60


def test_prune_never_deletes_samples_not_rolled_up(database: Database, seeded: Seeded) -> None:
    _store(database, seeded, BASE_MS, minutes=5)
    with database.session() as session:
        nothing_rolled = prune_samples_and_rollups(session, raw_before_ms=BASE_MS + 10 * MINUTE_MS,
                                                   rollup_before_ms=None)
    assert nothing_rolled.gpu_samples == 0
    assert nothing_rolled.host_samples == 30
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 2 * MINUTE_MS)
        pruned = prune_samples_and_rollups(session, raw_before_ms=BASE_MS + 10 * MINUTE_MS,
                                           rollup_before_ms=BASE_MS + MINUTE_MS)
        remaining_min = session.scalar(select(func.min(GpuSample.ts)))
    assert pruned.gpu_samples == 24  # two rolled-up minutes of two GPUs
    assert pruned.gpu_rollups == 2  # the first minute's buckets
    assert remaining_min == BASE_MS + 2 * MINUTE_MS


def test_apply_retention_over_a_long_history(database: Database, seeded: Seeded) -> None:
    day_ms = 86_400_000
    old_start = BASE_MS - 400 * day_ms
    _store(database, seeded, old_start, minutes=2)  # older than the rollup retention
    _store(database, seeded, BASE_MS - 30 * day_ms, minutes=2)  # rollup-only age
    _store(database, seeded, BASE_MS - 60_000 * 10, minutes=3)  # recent: raw kept
    settings = RetentionSettings(raw_days=7, rollup_days=365, rollup_lag_s=120)
    now = BASE_MS / 1000
    with database.session() as session:
        result = apply_retention(session, settings, now)
    assert result.rollup.buckets == (2 + 2 + 3) * 2
    assert result.pruned.gpu_samples == (2 + 2) * 6 * 2
    assert result.pruned.host_samples == (2 + 2) * 6
    assert result.pruned.gpu_rollups == 2 * 2
    with database.session() as session:
        second = apply_retention(session, settings, now)
        host_left = session.scalar(select(func.count()).select_from(HostSample))
    assert second.rollup.buckets == 0
    assert (second.pruned.gpu_samples, second.pruned.gpu_rollups) == (0, 0)
    assert host_left == 18
    assert len(_rollups(database)) == (2 + 3) * 2


def test_history_reads_rollups_past_raw_retention(database: Database, seeded: Seeded) -> None:
    from db.history import gpu_history
    from db.rollup_history import gpu_history_with_rollups
    from db.sql import SessionReader

    _store(database, seeded, BASE_MS, minutes=6)
    gpu0 = "alpha:0"
    with database.session() as session:
        reader = SessionReader(session)
        before = gpu_history(reader, since_ms=BASE_MS, until_ms=BASE_MS + 6 * MINUTE_MS,
                             gpu=gpu0, bucket_s=120)
        rollup_gpu_minutes(session, until_ms=BASE_MS + 4 * MINUTE_MS)
        prune_samples_and_rollups(session, raw_before_ms=BASE_MS + 4 * MINUTE_MS,
                                  rollup_before_ms=None)
    with database.session() as session:
        reader = SessionReader(session)
        raw_only = gpu_history(reader, since_ms=BASE_MS, until_ms=BASE_MS + 6 * MINUTE_MS,
                               gpu=gpu0, bucket_s=120)
        combined = gpu_history_with_rollups(reader, since_ms=BASE_MS,
                                            until_ms=BASE_MS + 6 * MINUTE_MS, gpu=gpu0,
                                            bucket_s=120)
        unbucketed = gpu_history_with_rollups(reader, since_ms=BASE_MS,
                                              until_ms=BASE_MS + 6 * MINUTE_MS, gpu=gpu0)
    assert len(raw_only) == 1  # the pruned buckets are gone from raw
    assert len(unbucketed) == 12
    assert [(p.ts_ms, p.samples, p.util_avg, p.util_max, p.temp_max, p.mem_used_max)
            for p in combined] == [
        (p.ts_ms, p.samples, p.util_avg, p.util_max, p.temp_max, p.mem_used_max) for p in before]
    # Rollups keep the mean memory used too (migration 0013), weighted like the other means.
    assert [p.mem_used_avg for p in combined] == pytest.approx(
        [p.mem_used_avg for p in before], rel=1e-9)
