"""Bucketed network rates sum the counters' increases sample to sample: a counter reset (a
reboot, a driver reload, a wrap) inside a bucket counts its new value from 0, as Prometheus'
rate() does, instead of making the bucket's max - min a huge bogus rate."""

from __future__ import annotations

import pytest

from db.engine import Database
from db.host_history import host_history
from db.rows import HostHistoryPoint
from db.samples import record_samples
from db.types import HostSampleIn
from tests.db.conftest import SeededFleet

MINUTE_MS = 60_000
T0 = 1_700_000_040_000  # a minute boundary (epoch ms)


def _record(database: Database, samples: list[HostSampleIn]) -> None:
    with database.session() as session:
        record_samples(session, samples, [])


def _buckets(database: Database, bucket_s: int = 60) -> list[HostHistoryPoint]:
    with database.reader() as reader:
        return host_history(reader, since_ms=T0, until_ms=T0 + 10 * MINUTE_MS,
                            bucket_s=bucket_s)


def test_a_reset_inside_a_bucket_counts_from_zero(database: Database,
                                                   seeded: SeededFleet) -> None:
    alpha = seeded.host_ids["alpha"]
    # 1 kB per 10 s on both counters; the host reboots between the 2nd and 3rd sample (the
    # counters restart near 0) and tx is unread once after it.
    rx = [50_000_000_000, 50_000_001_000, 500, 1_500]
    tx = [7_000_000, 7_001_000, 1_000, None]
    _record(database, [HostSampleIn(alpha, T0 + i * 10_000, net_rx_bytes=r, net_tx_bytes=t)
                       for i, (r, t) in enumerate(zip(rx, tx, strict=True))])
    (point,) = _buckets(database)
    assert point.samples == 4
    assert point.net_rx_bps == pytest.approx((1_000 + 500 + 1_000) / 30)  # was 1.67e9
    assert point.net_tx_bps == pytest.approx((1_000 + 1_000) / 30)
    assert point.net_rx_bytes == 50_000_001_000  # the highest reading, as before


def test_increases_skip_a_sample_without_the_reading(database: Database,
                                                     seeded: SeededFleet) -> None:
    alpha, beta = seeded.host_ids["alpha"], seeded.host_ids["beta"]
    _record(database, [
        HostSampleIn(alpha, T0, net_rx_bytes=100),
        HostSampleIn(alpha, T0 + 10_000),  # nothing read: the next increase is from 100
        HostSampleIn(alpha, T0 + 20_000, net_rx_bytes=40),  # reset: +40
        HostSampleIn(alpha, T0 + 30_000, net_rx_bytes=100),  # +60
        # Another host's counters in the same bucket do not mix in.
        HostSampleIn(beta, T0 + 5_000, net_rx_bytes=10**12),
        HostSampleIn(beta, T0 + 25_000, net_rx_bytes=10**12 + 2_000),
        # The next bucket starts afresh: its first reading is no increase.
        HostSampleIn(alpha, T0 + MINUTE_MS, net_rx_bytes=5),
        HostSampleIn(alpha, T0 + MINUTE_MS + 30_000, net_rx_bytes=35),
    ])
    points = {(point.host, point.ts_ms - T0): point for point in _buckets(database)}
    assert points["alpha", 0].net_rx_bps == pytest.approx(100 / 30)
    assert points["alpha", 0].net_tx_bps is None  # never read
    assert points["beta", 0].net_rx_bps == pytest.approx(2_000 / 20)
    assert points["alpha", MINUTE_MS].net_rx_bps == pytest.approx(30 / 30)
    # A wider bucket holds both minutes: 100 + 5 (the drop from 100 to 5 is a reset) + 30.
    (wide,) = [point for point in _buckets(database, bucket_s=3600) if point.host == "alpha"]
    assert wide.net_rx_bps == pytest.approx((100 + 5 + 30) / 90)


def test_without_a_reset_the_rate_is_the_counter_span(database: Database,
                                                      seeded: SeededFleet) -> None:
    """The same numbers as (last - first) / span, 64-bit counters included."""
    alpha = seeded.host_ids["alpha"]
    base = 2**62
    _record(database, [HostSampleIn(alpha, T0 + i * 15_000, net_rx_bytes=base + i * i * 1_000,
                                    net_tx_bytes=i) for i in range(4)])
    (point,) = _buckets(database)
    assert point.net_rx_bps == (9_000 / 45) and point.net_tx_bps == (3 / 45)
    assert point.net_rx_bytes == base + 9_000
