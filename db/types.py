"""Frozen value types that db's query functions take and return (db cannot use fleet's types).

Times: epoch seconds everywhere except sample and history timestamps (`ts`, `ts_ms`), which are
epoch milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

HostState = Literal[
    "unknown", "up", "unreachable", "auth_failed", "host_key_rejected", "probe_error", "down"
]
GpuState = Literal["ok", "hot", "failed", "degraded", "lost"]
TaskState = Literal[
    "queued", "placing", "starting", "running", "succeeded", "failed", "cancelled", "lost"
]
Connection = Literal["ssh", "local"]
HostSource = Literal["inventory", "ssh_config", "discovery", "adopted"]
Severity = Literal["info", "warning", "error", "critical"]
AllocationKind = Literal["task", "reservation"]
CandidateState = Literal["seen", "gone", "adopted"]

HOST_STATES: tuple[str, ...] = get_args(HostState)
GPU_STATES: tuple[str, ...] = get_args(GpuState)
TASK_STATES: tuple[str, ...] = get_args(TaskState)
ACTIVE_TASK_STATES: tuple[TaskState, ...] = ("queued", "placing", "starting", "running")
FINAL_TASK_STATES: tuple[TaskState, ...] = ("succeeded", "failed", "cancelled", "lost")
CONNECTIONS: tuple[str, ...] = get_args(Connection)
HOST_SOURCES: tuple[str, ...] = get_args(HostSource)
SEVERITIES: tuple[str, ...] = get_args(Severity)
ALLOCATION_KINDS: tuple[str, ...] = get_args(AllocationKind)
CANDIDATE_STATES: tuple[str, ...] = get_args(CandidateState)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What a host source says about a host; (address, port) identifies it."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    connection: Connection = "ssh"
    source: HostSource = "inventory"
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class HostProbeFacts:
    """Slow-changing facts a probe read from a host."""

    hostname: str | None = None
    kernel: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    gpu_count: int | None = None


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """Slow-changing facts of the GPU at index `idx` of a host."""

    idx: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GpuChange:
    """A GPU fact that changed since the last probe ("uuid", "name", ... or "added")."""

    idx: int
    field: str
    old: str | int | None
    new: str | int | None


@dataclass(frozen=True, slots=True)
class GpuUpsert:
    """Result of upsert_gpus: idx→gpu id, what changed, and known indices the probe did not list."""

    ids: dict[int, int]
    changes: tuple[GpuChange, ...] = ()
    missing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class HostSampleIn:
    """One host reading to store (ts in epoch milliseconds)."""

    host_id: int
    ts: int
    load_1m: float | None = None
    load_5m: float | None = None
    load_15m: float | None = None
    cpu_busy_pct: float | None = None
    memory_available_bytes: int | None = None
    disk_root_free_bytes: int | None = None
    disk_tasks_free_bytes: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSampleIn:
    """One GPU reading to store (ts in epoch milliseconds)."""

    gpu_id: int
    ts: int
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    memory_used_bytes: int | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    fan_speed_pct: float | None = None
    performance_state: int | None = None
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    ecc_errors_uncorrected: int | None = None
    process_count: int | None = None
    lost: bool = False


@dataclass(frozen=True, slots=True)
class GpuReading:
    """The values of one stored GPU sample (ts in epoch milliseconds)."""

    ts: int
    utilization_gpu_pct: float | None
    utilization_memory_pct: float | None
    memory_used_bytes: int | None
    temperature_c: float | None
    power_draw_w: float | None
    fan_speed_pct: float | None
    performance_state: int | None
    clock_sm_mhz: int | None
    clock_mem_mhz: int | None
    ecc_errors_uncorrected: int | None
    process_count: int | None
    lost: bool


@dataclass(frozen=True, slots=True)
class HostRow:
    """A stored host with its facts and state."""

    id: int
    name: str
    address: str
    port: int
    user: str | None
    connection: str
    source: str
    groups: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    state: str
    state_reason: str | None
    drained: bool
    drain_reason: str | None
    hostname: str | None
    kernel: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    cpu_count: int | None
    memory_total_bytes: int | None
    gpu_count: int | None
    first_seen: int
    last_seen: int
    last_probe_at: int | None


@dataclass(frozen=True, slots=True)
class LatestGpu:
    """A stored GPU with its host name, facts, state and newest sample (None if never sampled)."""

    host: str
    host_id: int
    gpu_id: int
    idx: int
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    memory_total_bytes: int | None
    state: str
    drained: bool
    drain_reason: str | None
    latest: GpuReading | None


@dataclass(frozen=True, slots=True)
class GpuHistoryPoint:
    """One raw sample, or one bucket of samples (ts_ms = bucket start), of one GPU.

    For a raw sample, `samples` is 1 and each avg equals its max.
    """

    host: str
    gpu_idx: int
    uuid: str | None
    gpu_id: int
    ts_ms: int
    samples: int
    util_avg: float | None
    util_max: float | None
    mem_used_avg: float | None
    mem_used_max: int | None
    temp_avg: float | None
    temp_max: float | None
    power_avg: float | None
    power_max: float | None


@dataclass(frozen=True, slots=True)
class EventRow:
    """A stored event; `host` is the host's name when the event concerns a host."""

    id: int
    ts: int
    kind: str
    severity: str
    message: str
    host_id: int | None
    host: str | None
    gpu_id: int | None
    task_id: int | None
    data: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AllocationRow:
    """A stored allocation; active while released_at is None."""

    id: int
    gpu_id: int
    task_id: int | None
    kind: str
    owner: str
    note: str | None
    created_at: int
    expires_at: int | None
    released_at: int | None
    release_reason: str | None
