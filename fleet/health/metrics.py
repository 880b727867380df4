"""Prometheus metrics of a fleet snapshot (GPU, host, allocation gauges) via prometheus_client."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from db.types import GPU_STATES
from fleet.model import HOST_STATES
from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot

CONTENT_TYPE = str(CONTENT_TYPE_LATEST)

Labels = Mapping[str, str]


@dataclass(frozen=True)
class MetricFamily:
    """One metric: name, help text, type and its samples (labels, value)."""

    name: str
    help: str
    type: Literal["gauge", "counter", "untyped"] = "gauge"
    samples: Sequence[tuple[Labels, float]] = ()


def render_metrics(families: Iterable[MetricFamily]) -> bytes:
    """The families in Prometheus text exposition, written by prometheus_client (escaping,
    number formats and the counter `_total` suffix are its own)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families)))
    return generate_latest(registry)


class _Families(Collector):
    """A collector yielding fixed families (one collection per scrape, built from a snapshot)."""

    def __init__(self, families: list[MetricFamily]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        kinds = {"gauge": "gauge", "counter": "counter", "untyped": "unknown"}
        for family in self.families:
            metric = Metric(family.name, family.help, kinds[family.type])
            sample_name = f"{metric.name}_total" if family.type == "counter" else metric.name
            for labels, value in family.samples:
                metric.add_sample(sample_name, {key: str(text) for key, text in labels.items()},
                                  float(value))
            yield metric


def _gpu_labels(gpu: GpuSnapshot) -> dict[str, str]:
    return {
        "host": gpu.host,
        "gpu": str(gpu.index),
        "uuid": gpu.reading.uuid or "",
        "model": gpu.reading.name or "",
    }


def _gpu_values(gpus: Sequence[GpuSnapshot], read: str) -> list[tuple[Labels, float]]:
    samples: list[tuple[Labels, float]] = []
    for gpu in gpus:
        value = getattr(gpu.reading, read)
        if value is not None:
            samples.append((_gpu_labels(gpu), float(value)))
    return samples


def _host_values(hosts: Sequence[HostSnapshot], read: str) -> list[tuple[Labels, float]]:
    samples: list[tuple[Labels, float]] = []
    for host in hosts:
        if host.report is None or host.state != "up":
            continue
        value = getattr(host.report.host, read)
        if value is not None:
            samples.append(({"host": host.spec.name}, float(value)))
    return samples


def snapshot_metrics(snapshot: FleetSnapshot | None) -> list[MetricFamily]:
    """Gauges for every host and GPU of `snapshot` (no samples, only HELP/TYPE, when None)."""
    hosts = snapshot.hosts if snapshot is not None else ()
    gpus = [gpu for host in hosts for gpu in host.gpus]
    allocated: dict[str, int] = {}
    idle: dict[tuple[str, str], int] = {}  # (owner, kind) → idle GPUs held
    for gpu in gpus:
        if gpu.allocation is not None:
            allocated[gpu.allocation.kind] = allocated.get(gpu.allocation.kind, 0) + 1
            if gpu.allocation.idle_since is not None:
                key = (gpu.allocation.owner, gpu.allocation.kind)
                idle[key] = idle.get(key, 0) + 1
    taken_at: list[tuple[Labels, float]] = [] if snapshot is None else [({}, snapshot.taken_at)]
    return [
        MetricFamily("fleet_snapshot_timestamp_seconds",
                     "Epoch time the latest fleet snapshot was taken.", samples=taken_at),
        MetricFamily("fleet_host_up", "1 when the host's state is up, else 0.",
                     samples=[({"host": h.spec.name}, 1.0 if h.state == "up" else 0.0)
                              for h in hosts]),
        MetricFamily("fleet_host_state", "1 for the host's current state (one series per state).",
                     samples=[({"host": h.spec.name, "state": state},
                               1.0 if h.state == state else 0.0)
                              for h in hosts for state in HOST_STATES]),
        MetricFamily("fleet_host_drained", "1 when the host is drained (no new work placed).",
                     samples=[({"host": h.spec.name}, 1.0 if h.drained else 0.0) for h in hosts]),
        MetricFamily("fleet_host_gpus", "GPUs the host's last probe listed.",
                     samples=[({"host": h.spec.name}, float(len(h.gpus))) for h in hosts]),
        MetricFamily("fleet_host_load1", "1-minute load average.",
                     samples=_host_values(hosts, "load_1m")),
        MetricFamily("fleet_host_cpu_busy_percent", "CPU busy percentage.",
                     samples=_host_values(hosts, "cpu_busy_pct")),
        MetricFamily("fleet_host_memory_available_bytes", "Memory available.",
                     samples=_host_values(hosts, "memory_available_bytes")),
        MetricFamily("fleet_gpu_utilization_percent", "GPU utilisation.",
                     samples=_gpu_values(gpus, "utilization_gpu_pct")),
        MetricFamily("fleet_gpu_memory_used_bytes", "GPU memory used.",
                     samples=_gpu_values(gpus, "memory_used_bytes")),
        MetricFamily("fleet_gpu_memory_total_bytes", "GPU memory total.",
                     samples=_gpu_values(gpus, "memory_total_bytes")),
        MetricFamily("fleet_gpu_temperature_celsius", "GPU temperature.",
                     samples=_gpu_values(gpus, "temperature_c")),
        MetricFamily("fleet_gpu_power_watts", "GPU power draw.",
                     samples=_gpu_values(gpus, "power_draw_w")),
        MetricFamily("fleet_gpu_state", "1 for the GPU's current health state "
                     "(one series per state: " + ", ".join(GPU_STATES) + ").",
                     samples=[({**_gpu_labels(g), "state": state}, 1.0 if g.state == state else 0.0)
                              for g in gpus for state in GPU_STATES]),
        MetricFamily("fleet_gpu_drained", "1 when the GPU is drained (no new work placed).",
                     samples=[(_gpu_labels(g), 1.0 if g.drained else 0.0) for g in gpus]),
        MetricFamily("fleet_gpu_allocated", "1 when the GPU is held by a task or reservation.",
                     samples=[(_gpu_labels(g), 0.0 if g.allocation is None else 1.0)
                              for g in gpus]),
        MetricFamily("fleet_allocations", "GPUs currently allocated, by allocation kind.",
                     samples=[({"kind": kind}, float(allocated.get(kind, 0)))
                              for kind in ("task", "reservation")]),
        MetricFamily("fleet_allocations_idle", "Allocated GPUs marked idle (idle: settings), "
                     "by owner and kind.",
                     samples=[({"owner": owner, "kind": kind}, float(count))
                              for (owner, kind), count in sorted(idle.items())]),
    ]
