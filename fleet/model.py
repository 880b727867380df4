"""Plain frozen value types shared by inventory, probe, storage mapping, CLI and TUI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

Connection = Literal["ssh", "local"]

# What one contact with a host found: it answered with a usable reading ("up"), or why not.
HostOutcome = Literal["up", "unreachable", "auth_failed", "host_key_rejected", "probe_error"]
# A host's state, the one vocabulary of `fleet status`, the monitor, the health rules and the
# database: "unknown" (never decided), "up", "down" (could not be reached) or what refused us.
# The rule from outcome to state is fleet.health.host_state.host_transition.
HostState = Literal["unknown", "up", "down", "auth_failed", "host_key_rejected", "probe_error"]
HOST_OUTCOMES: tuple[HostOutcome, ...] = get_args(HostOutcome)
HOST_STATES: tuple[HostState, ...] = get_args(HostState)

PROBE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class HostSpec:
    """One host as the inventory (or ssh config, or discovery) describes it.

    A host is identified by (address, port); `name` is the operator's label for it.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    python: str = "python3"
    connection: Connection = "ssh"
    proxy_jump: str | None = None
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    source: str = ""  # "FILE:LINE" where the host was defined, for error messages

    @property
    def key(self) -> tuple[str, int]:
        """The host's identity: (address, port)."""
        return (self.address, self.port)

    def label(self, name: str) -> str | None:
        """The value of label `name`, or None."""
        for key, value in self.labels:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A compute process on a GPU."""

    pid: int
    used_memory_bytes: int | None
    name: str | None = None
    uid: int | None = None  # its real uid on the host (None: not readable)
    user: str | None = None  # that uid's name on the host
    session: int | None = None  # its session id: a fleet task's is its wrapper's pid


@dataclass(frozen=True, slots=True)
class GpuReport:
    """Everything the probe read about one GPU; every field may be None when unsupported.

    `lost` is True when NVML reported the GPU lost or its handle could not be obtained;
    `error` explains any device-level failure.
    """

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
    processes: tuple[ProcessInfo, ...] = ()
    lost: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class HostReport:
    """Host-level facts and load read by the probe."""

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


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """One line of probe output: a timestamped reading of one host and its GPUs.

    `gpu_reason` says why there are no GPUs (no driver, library missing), if so.
    `method` is "nvml" or "nvidia-smi".
    """

    schema: int
    timestamp: float
    host: HostReport
    gpus: tuple[GpuReport, ...] = ()
    gpu_reason: str | None = None
    method: str = "nvml"
    warnings: tuple[str, ...] = field(default=())
