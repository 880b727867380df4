"""Host history in plain SQL: raw samples and per-bucket aggregates, the same on every backend."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.host_history import host_history
from db.rows import HostHistoryPoint
from db.samples import record_samples
from db.sql import SessionReader, SqlReader
from db.types import HostSampleIn
from tests.db.conftest import SeededFleet

MINUTE_MS = 60_000
T0 = 1_700_000_040_000  # a minute boundary (epoch ms)


@pytest.fixture
def sampled(database: Database, seeded: SeededFleet) -> Database:
    """alpha: four samples in the first minute (one with NULL readings), one in the next;
    beta: one sample in the first minute; one alpha sample just before T0 (outside)."""
    alpha, beta = seeded.host_ids["alpha"], seeded.host_ids["beta"]
    samples = [
        HostSampleIn(alpha, T0 - 1, load_1m=99.0, cpu_busy_pct=99.0),
        HostSampleIn(alpha, T0, load_1m=1.0, cpu_busy_pct=10.0, memory_available_bytes=8 << 30,
                     net_rx_bytes=1_000, net_tx_bytes=50),
        HostSampleIn(alpha, T0 + 15_000, load_1m=3.0, cpu_busy_pct=30.0,
                     memory_available_bytes=6 << 30, net_rx_bytes=4_000, net_tx_bytes=80),
        HostSampleIn(alpha, T0 + 30_000),  # a reading that answered nothing
        HostSampleIn(alpha, T0 + 45_000, load_1m=2.0, cpu_busy_pct=20.0,
                     memory_available_bytes=7 << 30, net_rx_bytes=10_000, net_tx_bytes=140),
        HostSampleIn(alpha, T0 + MINUTE_MS, load_1m=5.0, memory_available_bytes=5 << 30,
                     net_rx_bytes=20_000),
        HostSampleIn(beta, T0 + 5_000, load_1m=0.5, cpu_busy_pct=5.0,
                     memory_available_bytes=(1 << 40) + 1, net_rx_bytes=2**62, net_tx_bytes=7),
    ]
    with database.session() as session:
        record_samples(session, samples, [])
    return database


def _history(database: Database, *, host: str | None = None, bucket_s: int | None = None,
             limit: int | None = None) -> list[HostHistoryPoint]:
    """The first two minutes from T0, read on one snapshot; a write transaction reads the same."""
    def read(reader: SqlReader) -> list[HostHistoryPoint]:
        return host_history(reader, since_ms=T0, until_ms=T0 + 2 * MINUTE_MS, host=host,
                            bucket_s=bucket_s, limit=limit)

    with database.reader() as reader:
        points = read(reader)
    with database.session() as session:
        assert read(SessionReader(session)) == points
    return points


def test_raw_samples_in_time_then_host_order(sampled: Database) -> None:
    points = _history(sampled)
    assert [(point.host, point.ts_ms - T0) for point in points] == [
        ("alpha", 0), ("beta", 5_000), ("alpha", 15_000), ("alpha", 30_000), ("alpha", 45_000),
        ("alpha", MINUTE_MS)]
    first = points[0]
    assert first == HostHistoryPoint(
        host="alpha", ts_ms=T0, samples=1, load_1m_avg=1.0, load_1m_max=1.0, cpu_busy_avg=10.0,
        cpu_busy_max=10.0, memory_available_min=8 << 30, memory_available_avg=float(8 << 30),
        net_rx_bytes=1_000, net_tx_bytes=50, net_rx_bps=None, net_tx_bps=None)
    assert type(first.memory_available_avg) is float and type(first.memory_available_min) is int
    assert points[3].load_1m_avg is None and points[3].memory_available_avg is None
    assert points[1].net_rx_bytes == 2**62  # a 64-bit counter comes back whole


def test_buckets_aggregate_per_host_and_rate_the_counters(sampled: Database) -> None:
    points = _history(sampled, bucket_s=60)
    assert [(point.host, point.ts_ms - T0, point.samples) for point in points] == [
        ("alpha", 0, 4), ("beta", 0, 1), ("alpha", MINUTE_MS, 1)]
    alpha = points[0]
    assert alpha.load_1m_avg == pytest.approx(2.0) and alpha.load_1m_max == 3.0  # NULL skipped
    assert alpha.cpu_busy_avg == pytest.approx(20.0) and alpha.cpu_busy_max == 30.0
    assert alpha.memory_available_min == 6 << 30
    assert alpha.memory_available_avg == pytest.approx(float(7 << 30))
    assert (alpha.net_rx_bytes, alpha.net_tx_bytes) == (10_000, 140)
    assert alpha.net_rx_bps == pytest.approx(9_000 / 45) and alpha.net_tx_bps == pytest.approx(2.0)
    assert all(type(value) is float for value in (alpha.load_1m_avg, alpha.cpu_busy_avg,
                                                   alpha.memory_available_avg))
    assert type(alpha.ts_ms) is int and type(alpha.memory_available_min) is int
    beta = points[1]
    assert beta.net_rx_bps is None and beta.memory_available_min == (1 << 40) + 1  # one sample


def test_a_bucket_wider_than_the_range_and_filters(sampled: Database) -> None:
    (alpha,) = _history(sampled, bucket_s=3600, host="alpha")
    assert alpha.samples == 5 and alpha.ts_ms == T0 // 3_600_000 * 3_600_000
    assert alpha.net_rx_bps == pytest.approx(19_000 / 60)
    assert [point.host for point in _history(sampled, host="beta")] == ["beta"]
    assert [point.ts_ms - T0 for point in _history(sampled, limit=2)] == [0, 5_000]
    assert len(_history(sampled, bucket_s=60, limit=1)) == 1
    assert _history(sampled, host="nosuch") == []


def test_a_non_positive_bucket_or_limit_is_refused(database: Database) -> None:
    with database.reader() as reader:
        with pytest.raises(ValueError, match="bucket size"):
            host_history(reader, since_ms=0, until_ms=1, bucket_s=0)
        with pytest.raises(ValueError, match="limit must be positive"):
            host_history(reader, since_ms=0, until_ms=1, limit=0)
