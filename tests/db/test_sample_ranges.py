"""One absurd reading never costs the batch it is in: 64-bit probe integers, NULL beyond that."""

from __future__ import annotations

from sqlalchemy import select

from db.engine import Database
from db.models import GpuSample, Host, HostSample
from db.samples import record_samples
from db.types import GpuSampleIn, HostSampleIn
from fleet.fanout import HostStatus
from fleet.model import HostSpec
from fleet.probe.parse import report_from_dict
from fleet.recorder import record_statuses
from tests.db.conftest import SeededFleet

BEYOND_64_BITS = 2**70
BEYOND_32_BITS = 2**40  # a clock or counter no 4-byte column holds


def test_a_batch_with_absurd_readings_keeps_every_row_and_every_fitting_value(
    database: Database, seeded: SeededFleet
) -> None:
    a0, a1 = seeded.gpu_ids[("alpha", 0)], seeded.gpu_ids[("alpha", 1)]
    gpu_rows = [
        GpuSampleIn(a0, 1_000, utilization_gpu_pct=10.0, memory_used_bytes=1 << 30),
        GpuSampleIn(a0, 2_000, clock_sm_mhz=BEYOND_32_BITS, ecc_errors_uncorrected=2**62,
                    process_count=BEYOND_32_BITS, performance_state=BEYOND_32_BITS),
        GpuSampleIn(a1, 2_000, memory_used_bytes=BEYOND_64_BITS, process_count=-(2**64),
                    temperature_c=50.0),
    ]
    host_rows = [HostSampleIn(seeded.host_ids["alpha"], 2_000, net_rx_bytes=BEYOND_64_BITS,
                              net_tx_bytes=7)]
    with database.sessionmaker() as session:
        assert record_samples(session, host_rows, gpu_rows) == 3
    with database.session() as session:
        stored = session.execute(
            select(GpuSample.gpu_id, GpuSample.ts, GpuSample.memory_used_bytes,
                   GpuSample.clock_sm_mhz, GpuSample.process_count, GpuSample.temperature_c,
                   GpuSample.ecc_errors_uncorrected)
            .order_by(GpuSample.ts, GpuSample.gpu_id)).all()
        host = session.execute(select(HostSample.net_rx_bytes, HostSample.net_tx_bytes)).one()
    assert [tuple(row) for row in stored] == [
        (a0, 1_000, 1 << 30, None, None, None, None),
        (a0, 2_000, None, BEYOND_32_BITS, BEYOND_32_BITS, None, 2**62),
        (a1, 2_000, None, None, None, 50.0, None),
    ]
    assert tuple(host) == (None, 7)


def test_a_probe_reporting_huge_integers_is_recorded_with_its_neighbours(
    database: Database,
) -> None:
    """The `fleet status` path: parse (bounded to 64 bits) then facts and samples, one batch."""
    line = {
        "schema": 1, "ts": 1_700_000_000.0,
        "host": {"cpu_count": BEYOND_32_BITS, "memory_total_bytes": BEYOND_64_BITS},
        "gpus": [
            {"index": 0, "uuid": "GPU-huge-0", "clock_sm_mhz": BEYOND_32_BITS,
             "clock_mem_mhz": BEYOND_64_BITS, "utilization_gpu_pct": 99.0},
            {"index": 1, "uuid": "GPU-huge-1", "utilization_gpu_pct": 5.0},
        ],
    }
    statuses = [
        HostStatus(HostSpec("huge", "10.9.0.1"), "up", None,
                   report_from_dict(line, "huge"), 0.1, 1_700_000_000.0),
        HostStatus(HostSpec("plain", "10.9.0.2"), "up", None,
                   report_from_dict({**line, "host": {}, "gpus": [{"index": 0}]}, "plain"),
                   0.1, 1_700_000_000.0),
    ]
    with database.session() as session:
        record_statuses(session, statuses, now=1_700_000_000)
    with database.session() as session:
        rows = session.execute(select(Host.name, Host.cpu_count))
        cpu_counts = {name: count for name, count in rows}
        samples = session.execute(
            select(GpuSample.clock_sm_mhz, GpuSample.clock_mem_mhz, GpuSample.utilization_gpu_pct)
            .order_by(GpuSample.gpu_id)).all()
    assert cpu_counts == {"huge": BEYOND_32_BITS, "plain": None}
    assert [tuple(row) for row in samples] == [
        (BEYOND_32_BITS, None, 99.0), (None, None, 5.0), (None, None, None)]
