"""A probe's reading of one host and its GPUs as typed values, decoded straight from its line.

msgspec Structs, apart from fleet.model, so that a command that never reads a probe
(`fleet --help`, `fleet tasks`) does not import msgspec.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from fleet.probe.limits import (
    MAX_GPUS,
    MAX_INT,
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_PROCESSES_PER_GPU,
)

# The probe's line decodes straight into the report types below (fleet.probe.typed): msgspec
# checks these bounds and refuses unknown fields then (such a line takes the lenient parser);
# a report built in code is not checked.
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
_Pid = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
_Index = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS)]
_Number = Annotated[float, msgspec.Meta(gt=-1e18, lt=1e18)]
NameText = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)]  # longer: cut by sanitize_text
MessageText = Annotated[str, msgspec.Meta(max_length=MAX_MESSAGE_CHARS)]


class ProcessInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A compute process on a GPU."""

    pid: _Pid
    used_memory_bytes: _Count | None
    name: NameText | None = None
    uid: _Count | None = None  # its real uid on the host (None: not readable)
    user: NameText | None = None  # that uid's name on the host
    session: _Count | None = None  # its session id: a fleet task's is its wrapper's pid


_Processes = Annotated[tuple[ProcessInfo, ...], msgspec.Meta(max_length=MAX_PROCESSES_PER_GPU)]


class GpuReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything the probe read about one GPU; every field may be None when unsupported.

    `lost` is True when NVML reported the GPU lost or its handle could not be obtained;
    `error` explains any device-level failure.
    """

    index: _Index
    uuid: NameText | None = None
    name: NameText | None = None
    pci_bus_id: NameText | None = None
    memory_total_bytes: _Count | None = None
    memory_used_bytes: _Count | None = None
    utilization_gpu_pct: _Number | None = None
    utilization_memory_pct: _Number | None = None
    temperature_c: _Number | None = None
    power_draw_w: _Number | None = None
    power_limit_w: _Number | None = None
    fan_speed_pct: _Number | None = None
    performance_state: _Count | None = None
    clock_sm_mhz: _Count | None = None
    clock_mem_mhz: _Count | None = None
    ecc_errors_corrected: _Count | None = None
    ecc_errors_uncorrected: _Count | None = None
    retired_pages_pending: bool | None = None
    processes: _Processes = ()
    lost: bool = False
    error: MessageText | None = None


class HostReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Host-level facts and load read by the probe."""

    hostname: NameText | None = None
    kernel: NameText | None = None
    driver_version: NameText | None = None
    cuda_driver_version: NameText | None = None
    nvml_version: NameText | None = None
    cpu_count: _Count | None = None
    load_1m: _Number | None = None
    load_5m: _Number | None = None
    load_15m: _Number | None = None
    cpu_busy_pct: _Number | None = None
    memory_total_bytes: _Count | None = None
    memory_available_bytes: _Count | None = None
    disk_root_total_bytes: _Count | None = None
    disk_root_free_bytes: _Count | None = None
    disk_tasks_total_bytes: _Count | None = None
    disk_tasks_free_bytes: _Count | None = None
    net_rx_bytes: _Count | None = None
    net_tx_bytes: _Count | None = None
    python_version: NameText | None = None


class ProbeReport(msgspec.Struct, frozen=True):
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
    warnings: tuple[str, ...] = ()
