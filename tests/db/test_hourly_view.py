"""The gpu_utilisation_hourly view: weighted hourly figures from the 1-minute rollups."""

from __future__ import annotations

from sqlalchemy import text

from db.engine import Database
from db.retention import rollup_gpu_minutes
from db.samples import record_samples
from db.types import GpuSampleIn
from tests.db.conftest import SeededFleet

HOUR_MS = 3_600_000
BASE_MS = 1_764_460_800_000  # an exact hour (2025-11-30 00:00 UTC)


def test_hourly_view_weights_minutes_by_sample_count(database: Database,
                                                     seeded: SeededFleet) -> None:
    gpu_id = seeded.gpu_ids[("alpha", 0)]
    samples = [
        # hour 0: one minute with 3 samples at 10 %, one minute with 1 sample at 90 %
        *(GpuSampleIn(gpu_id=gpu_id, ts=BASE_MS + i * 1000, utilization_gpu_pct=10.0,
                      temperature_c=40.0, power_draw_w=100.0, memory_used_bytes=5)
          for i in range(3)),
        GpuSampleIn(gpu_id=gpu_id, ts=BASE_MS + 60_000, utilization_gpu_pct=90.0,
                    temperature_c=80.0, power_draw_w=300.0, memory_used_bytes=7),
        # hour 1: one sample
        GpuSampleIn(gpu_id=gpu_id, ts=BASE_MS + HOUR_MS, utilization_gpu_pct=50.0,
                    temperature_c=None, power_draw_w=None, memory_used_bytes=None),
    ]
    with database.session() as session:
        record_samples(session, [], samples)
    with database.session() as session:
        rollup_gpu_minutes(session, until_ms=BASE_MS + 2 * HOUR_MS)

    with database.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT host, gpu_index, hour_s, samples, util_avg, util_max, mem_used_max, "
            "temp_avg, temp_max, power_max FROM gpu_utilisation_hourly ORDER BY hour_s"
        )).all()

    assert [tuple(row) for row in rows] == [
        ("alpha", 0, BASE_MS // 1000, 4, 30.0, 90.0, 7, 50.0, 80.0, 300.0),
        ("alpha", 0, BASE_MS // 1000 + 3600, 1, 50.0, 50.0, None, None, None, None),
    ]
