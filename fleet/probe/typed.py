"""The probe's JSON line as msgspec structs: decoded and bounds-checked in one C pass."""

from __future__ import annotations

import sys
from typing import Annotated

import msgspec

from fleet.model import PROBE_SCHEMA_VERSION, GpuReport, HostReport, ProbeReport, ProcessInfo
from fleet.probe.bounds import (
    KNOWN_METHODS,
    MAX_GPUS,
    MAX_INT,
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_PROCESSES_PER_GPU,
    MAX_WARNINGS,
    capped_warnings,
    sanitize_text,
)

# The probe's line as typed structs: the same bounds as the lenient path, checked by msgspec.
# Unknown fields are refused (so they take the lenient path, like any other surprise).
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
_Pid = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
_Number = Annotated[float, msgspec.Meta(gt=-1e18, lt=1e18)]
_Timestamp = Annotated[float, msgspec.Meta(ge=0, le=sys.float_info.max)]
_Index = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS)]
# Texts longer than sanitize_text keeps them make the line take the lenient path, which cuts them.
_Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)]
_Message = Annotated[str, msgspec.Meta(max_length=MAX_MESSAGE_CHARS)]


class _WireProcess(msgspec.Struct, forbid_unknown_fields=True):
    pid: _Pid
    used_memory_bytes: _Count | None = None
    name: _Name | None = None
    uid: _Count | None = None
    user: _Name | None = None
    session: _Count | None = None


class _WireGpu(msgspec.Struct, forbid_unknown_fields=True):
    index: _Index
    uuid: _Name | None = None
    name: _Name | None = None
    pci_bus_id: _Name | None = None
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
    processes: (
        Annotated[list[_WireProcess], msgspec.Meta(max_length=MAX_PROCESSES_PER_GPU)] | None
    ) = None
    lost: bool | None = None
    error: _Message | None = None


class _WireHost(msgspec.Struct, forbid_unknown_fields=True):
    hostname: _Name | None = None
    kernel: _Name | None = None
    driver_version: _Name | None = None
    cuda_driver_version: _Name | None = None
    nvml_version: _Name | None = None
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
    python_version: _Name | None = None


class _WireLine(msgspec.Struct, forbid_unknown_fields=True):
    schema: int
    ts: _Timestamp
    method: _Name | None = None
    host: _WireHost = msgspec.field(default_factory=_WireHost)
    gpus: Annotated[list[_WireGpu], msgspec.Meta(max_length=MAX_GPUS)] | None = None
    gpu_reason: _Message | None = None
    warnings: Annotated[list[_Message], msgspec.Meta(max_length=MAX_WARNINGS)] | None = None


_DECODER = msgspec.json.Decoder(_WireLine)
_QUOTE = ord('"')
_GPU_REPORTS = tuple[GpuReport, ...]


def _text(value: str | None, limit: int = MAX_NAME_CHARS) -> str | None:
    return None if value is None else sanitize_text(value, limit)


def typed_report(line: bytes | str) -> ProbeReport | None:
    """The report of a line that fits the typed schema exactly, or None (take the lenient path)."""
    try:
        wire = _DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    method = _text(wire.method) or "nvml"
    if wire.schema != PROBE_SCHEMA_VERSION or method not in KNOWN_METHODS:
        return None
    report = _converted(wire) if _needs_no_cleaning(line, wire) else None
    return report if report is not None else _built(wire, method)


def _needs_no_cleaning(line: bytes | str, wire: _WireLine) -> bool:
    """Whether every text of the line is already what sanitize_text would make of it, and its
    GPUs come in order (else the builder sorts or refuses them).

    The structs bound every text's length. Raw JSON without a backslash has no escapes, so its
    strings hold only the characters on the line; ASCII without DEL is printable there (JSON
    forbids raw control characters). A space is then the only white space a text can hold, and
    with no space next to a quote (compact JSON, as the probe writes it), none starts or ends
    with one.
    """
    if (not isinstance(line, bytes) or not line.isascii() or b"\\" in line or b"\x7f" in line
            or _space_next_to_a_quote(line)):
        return False
    indexes = [gpu.index for gpu in wire.gpus or ()]
    return indexes == sorted(set(indexes))


def _space_next_to_a_quote(line: bytes) -> bool:
    """Whether a space on the line touches a quote (a space is rare there and a quote common,
    so this visits the spaces: several times faster than searching for either pair)."""
    at = line.find(b" ")
    while at >= 0:
        if (at > 0 and line[at - 1] == _QUOTE) or line[at + 1:at + 2] == b'"':
            return True
        at = line.find(b" ", at + 1)
    return False


def _converted(wire: _WireLine) -> ProbeReport | None:
    """The report built in C from the validated structs (texts already clean), or None where a
    value does not fit the report's own types (`lost: null`: the builder makes that False)."""
    try:
        host = msgspec.convert(wire.host, HostReport, from_attributes=True)
        gpus = msgspec.convert(wire.gpus or (), _GPU_REPORTS, from_attributes=True)
    except msgspec.ValidationError:
        return None
    return ProbeReport(
        schema=PROBE_SCHEMA_VERSION, timestamp=wire.ts, host=host, gpus=gpus,
        gpu_reason=wire.gpu_reason, method=wire.method or "nvml",
        warnings=tuple(wire.warnings or ()),
    )


def _built(wire: _WireLine, method: str) -> ProbeReport | None:
    """The report built field by field, each text through sanitize_text."""
    gpus = [_typed_gpu(gpu) for gpu in wire.gpus or ()]
    if len({gpu.index for gpu in gpus}) != len(gpus):
        return None
    h = wire.host
    host_report = HostReport(
        hostname=_text(h.hostname),
        kernel=_text(h.kernel),
        driver_version=_text(h.driver_version),
        cuda_driver_version=_text(h.cuda_driver_version),
        nvml_version=_text(h.nvml_version),
        cpu_count=h.cpu_count,
        load_1m=h.load_1m,
        load_5m=h.load_5m,
        load_15m=h.load_15m,
        cpu_busy_pct=h.cpu_busy_pct,
        memory_total_bytes=h.memory_total_bytes,
        memory_available_bytes=h.memory_available_bytes,
        disk_root_total_bytes=h.disk_root_total_bytes,
        disk_root_free_bytes=h.disk_root_free_bytes,
        disk_tasks_total_bytes=h.disk_tasks_total_bytes,
        disk_tasks_free_bytes=h.disk_tasks_free_bytes,
        net_rx_bytes=h.net_rx_bytes,
        net_tx_bytes=h.net_tx_bytes,
        python_version=_text(h.python_version),
    )
    return ProbeReport(
        schema=PROBE_SCHEMA_VERSION,
        timestamp=wire.ts,
        host=host_report,
        gpus=tuple(sorted(gpus, key=lambda gpu: gpu.index)),
        gpu_reason=_text(wire.gpu_reason, MAX_MESSAGE_CHARS),
        method=method,
        warnings=capped_warnings(
            [sanitize_text(item, MAX_MESSAGE_CHARS) for item in wire.warnings or ()]
        ),
    )


def _typed_gpu(gpu: _WireGpu) -> GpuReport:
    return GpuReport(
        index=gpu.index,
        uuid=_text(gpu.uuid),
        name=_text(gpu.name),
        pci_bus_id=_text(gpu.pci_bus_id),
        memory_total_bytes=gpu.memory_total_bytes,
        memory_used_bytes=gpu.memory_used_bytes,
        utilization_gpu_pct=gpu.utilization_gpu_pct,
        utilization_memory_pct=gpu.utilization_memory_pct,
        temperature_c=gpu.temperature_c,
        power_draw_w=gpu.power_draw_w,
        power_limit_w=gpu.power_limit_w,
        fan_speed_pct=gpu.fan_speed_pct,
        performance_state=gpu.performance_state,
        clock_sm_mhz=gpu.clock_sm_mhz,
        clock_mem_mhz=gpu.clock_mem_mhz,
        ecc_errors_corrected=gpu.ecc_errors_corrected,
        ecc_errors_uncorrected=gpu.ecc_errors_uncorrected,
        retired_pages_pending=gpu.retired_pages_pending,
        processes=tuple(
            ProcessInfo(pid=p.pid, used_memory_bytes=p.used_memory_bytes, name=_text(p.name),
                        uid=p.uid, user=_text(p.user), session=p.session)
            for p in gpu.processes or ()
        ),
        lost=gpu.lost is True,
        error=_text(gpu.error, MAX_MESSAGE_CHARS),
    )
