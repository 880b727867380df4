"""The monitor's own metrics: what its writer recorded, refused or let go, and the processes
fleet did not start, as Prometheus families (the snapshot's gauges: fleet.health.metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.health.metrics import MetricFamily

if TYPE_CHECKING:
    from fleet.health.unmanaged import UnmanagedWatch
    from fleet.monitor.writer import SampleWriter


def monitor_metrics(writer: SampleWriter, unmanaged: UnmanagedWatch) -> list[MetricFamily]:
    """Counters of the writer's work and a gauge of unmanaged processes per GPU."""
    stats = writer.stats
    return [
        MetricFamily("fleet_monitor_gpu_samples_written", "GPU samples written.", "counter",
                     [({}, float(stats.gpu_samples))]),
        MetricFamily("fleet_monitor_failed_writes", "Writes the database refused (their "
                     "rows kept for a retry).", "counter",
                     [({}, float(stats.failed_flushes))]),
        MetricFamily("fleet_monitor_readings_dropped", "Readings let go because the retry "
                     "buffer was full while the database was unavailable.", "counter",
                     [({}, float(stats.dropped_reports))]),
        MetricFamily("fleet_monitor_events_dropped", "Events let go (the oldest) because the "
                     "retry buffer was full while the database was unavailable.", "counter",
                     [({}, float(stats.dropped_events))]),
        MetricFamily("fleet_monitor_buffered_rows", "Sample rows waiting to be written.",
                     samples=[({}, float(writer.buffered_rows))]),
        MetricFamily("fleet_gpu_unmanaged_processes", "Processes fleet did not start on "
                     "the GPU (not its task's, not its reservation owner's).",
                     samples=[({"host": host, "gpu": str(index)}, float(count))
                              for (host, index), count in sorted(unmanaged.counts().items())]),
    ]
