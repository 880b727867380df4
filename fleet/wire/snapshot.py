"""The live snapshot on the wire: hosts, GPUs, readings, states and allocations (`/v1/status`)."""

from __future__ import annotations

from msgspec import Struct

from fleet.snapshot import FleetSnapshot
from fleet.wire.codec import from_wire, to_wire


class ProcessWire(Struct, frozen=True):
    """fleet.reports.ProcessInfo."""

    pid: int
    used_memory_bytes: int | None
    name: str | None = None
    uid: int | None = None
    user: str | None = None
    session: int | None = None


class GpuReadingWire(Struct, frozen=True):
    """fleet.reports.GpuReport: everything the probe read about one GPU."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_speed_pct: float | None = None
    performance_state: int | None = None
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    ecc_errors_corrected: int | None = None
    ecc_errors_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    processes: tuple[ProcessWire, ...] = ()
    lost: bool = False
    error: str | None = None


class HostReadingWire(Struct, frozen=True):
    """fleet.reports.HostReport: host facts and load."""

    hostname: str | None = None
    kernel: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    cpu_count: int | None = None
    load_1m: float | None = None
    load_5m: float | None = None
    load_15m: float | None = None
    cpu_busy_pct: float | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    disk_root_total_bytes: int | None = None
    disk_root_free_bytes: int | None = None
    disk_tasks_total_bytes: int | None = None
    disk_tasks_free_bytes: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    python_version: str | None = None


class ProbeReportWire(Struct, frozen=True):
    """fleet.reports.ProbeReport: one timestamped reading of a host and its GPUs."""

    schema: int
    timestamp: float
    host: HostReadingWire
    gpus: tuple[GpuReadingWire, ...] = ()
    gpu_reason: str | None = None
    method: str = "nvml"
    warnings: tuple[str, ...] = ()


class HostSpecWire(Struct, frozen=True):
    """fleet.model.HostSpec without what stays on the server (key file, Python, source)."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    connection: str = "ssh"
    proxy_jump: str | None = None
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


class AllocationInfoWire(Struct, frozen=True):
    """fleet.snapshot.AllocationInfo: who holds a GPU."""

    allocation_id: int
    kind: str
    owner: str
    task_id: int | None = None
    task_name: str | None = None
    expires_at: int | None = None
    note: str | None = None
    idle_since: int | None = None


class GpuSnapshotWire(Struct, frozen=True):
    """fleet.snapshot.GpuSnapshot: a GPU's reading, health state, drain flag and holder."""

    host: str
    index: int
    reading: GpuReadingWire
    state: str = "ok"
    drained: bool = False
    drain_reason: str | None = None
    allocation: AllocationInfoWire | None = None
    unmanaged: tuple[ProcessWire, ...] = ()


class HostSnapshotWire(Struct, frozen=True):
    """fleet.snapshot.HostSnapshot: a host as last seen."""

    spec: HostSpecWire
    state: str
    reason: str | None = None
    report: ProbeReportWire | None = None
    last_seen: float | None = None
    drained: bool = False
    drain_reason: str | None = None
    gpus: tuple[GpuSnapshotWire, ...] = ()


class SnapshotWire(Struct, frozen=True):
    """fleet.snapshot.FleetSnapshot: every host at one moment (`changed`: hosts that differ)."""

    taken_at: float
    hosts: tuple[HostSnapshotWire, ...]
    changed: frozenset[str] = frozenset()


def snapshot_to_wire(snapshot: FleetSnapshot) -> SnapshotWire:
    """The monitor's snapshot as its wire struct."""
    return to_wire(snapshot, SnapshotWire)


def snapshot_from_wire(wire: SnapshotWire) -> FleetSnapshot:
    """The wire struct as the same FleetSnapshot the engine uses."""
    return from_wire(wire, FleetSnapshot)
