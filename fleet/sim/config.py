"""Simulated GPUs of one host: their dataclasses and the config file libnvml.c reads.

The file format (line-based, one `key=value` per line, `#` comments) is read by the C library
on every change and by `read_config`:

    fleet_sim_nvml=1                 format version; must be the first non-comment line
    driver_version=550.54.15         host-wide values come before the first [gpu]
    cuda_driver_version=12040
    nvml_version=12.550.54.15
    init_error=0                     nonzero: nvmlInitWithFlags returns this NVML code
    [gpu]                            one section per GPU; the GPU index is its position
    name=NVIDIA A100-SXM4-80GB
    uuid=GPU-...
    power_draw_w=61.25               watts (NVML reports milliwatts)
    lost=0                           1: every call taking this GPU's handle returns 15
    process=4242:1073741824          repeatable: pid:used bytes
    error=nvmlDeviceGetFanSpeed:3    repeatable: NVML function name:return code
"""

from __future__ import annotations

import math
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.errors import ConfigError

FORMAT_LINE = "fleet_sim_nvml=1"
MIB = 1024 * 1024
GIB = 1024 * MIB

# NVML return codes the scenarios use (values from nvml.h).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15

# Limits shared with libnvml.c (buffer sizes and array lengths there).
MAX_GPUS = 64
MAX_PROCESSES = 64
MAX_ERRORS = 32
_TEXT_LIMIT = 95
_PCI_BUS_ID_LIMIT = 31
_U32 = 2**32 - 1
_U64 = 2**64 - 1
_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class SimGpu:
    """One simulated GPU: every value NVML reports for it, plus injected failures."""

    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int
    memory_used_bytes: int = 0
    utilization_gpu_pct: int = 0
    utilization_memory_pct: int = 0
    temperature_c: int = 33
    power_draw_w: float = 60.0
    power_limit_w: float = 400.0
    fan_speed_pct: int = 30
    performance_state: int = 0
    clock_sm_mhz: int = 210
    clock_mem_mhz: int = 1593
    ecc_errors_corrected: int = 0
    ecc_errors_uncorrected: int = 0
    retired_pages_pending: bool = False
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes)
    lost: bool = False
    errors: dict[str, int] = field(default_factory=dict)  # NVML function name -> return code
    pci_device_id: int = 0x20B210DE
    pci_subsystem_id: int = 0x134F10DE


@dataclass
class SimHostGpus:
    """All GPUs of one simulated host and its driver."""

    gpus: list[SimGpu]
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    nvml_version: str = "12.550.54.15"
    init_error: int = 0  # e.g. 9 = NVML_ERROR_DRIVER_NOT_LOADED




_UINT_TEXT = re.compile(r"0[xX][0-9A-Fa-f]+|0|[1-9][0-9]*")
_WATTS_TEXT = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")


def _parse_uint(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not _UINT_TEXT.fullmatch(text):
            raise ValueError(f"{text!r} is not an unsigned decimal or 0x-hex integer")
        value = int(text, 0)
        if not 0 <= value <= limit:
            raise ValueError(f"{value} is outside 0..{limit}")
        return value

    return parse


def _parse_flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("expected 0 or 1")
    return text == "1"


def _parse_watts(text: str) -> float:
    if not _WATTS_TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not a plain decimal number")
    value = float(text)
    if not math.isfinite(value) or value < 0 or value * 1000 > 4e9:
        raise ValueError("expected a non-negative number of watts below 4e6")
    return value


def _parse_text(limit: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if len(text.encode()) > limit:
            raise ValueError(f"longer than {limit} bytes")
        return text

    return parse


_HOST_KEYS: dict[str, Callable[[str], Any]] = {
    "driver_version": _parse_text(_TEXT_LIMIT),
    "cuda_driver_version": _parse_uint(2**31 - 1),
    "nvml_version": _parse_text(_TEXT_LIMIT),
    "init_error": _parse_uint(2**31 - 1),
}

_GPU_KEYS: dict[str, Callable[[str], Any]] = {
    "name": _parse_text(_TEXT_LIMIT),
    "uuid": _parse_text(_TEXT_LIMIT),
    "pci_bus_id": _parse_text(_PCI_BUS_ID_LIMIT),
    "pci_device_id": _parse_uint(_U32),
    "pci_subsystem_id": _parse_uint(_U32),
    "memory_total_bytes": _parse_uint(_U64),
    "memory_used_bytes": _parse_uint(_U64),
    "utilization_gpu_pct": _parse_uint(100),
    "utilization_memory_pct": _parse_uint(100),
    "temperature_c": _parse_uint(_U32),
    "power_draw_w": _parse_watts,
    "power_limit_w": _parse_watts,
    "fan_speed_pct": _parse_uint(100),
    "performance_state": _parse_uint(32),
    "clock_sm_mhz": _parse_uint(_U32),
    "clock_mem_mhz": _parse_uint(_U32),
    "ecc_errors_corrected": _parse_uint(_U64),
    "ecc_errors_uncorrected": _parse_uint(_U64),
    "retired_pages_pending": _parse_flag,
    "lost": _parse_flag,
}
_REQUIRED_GPU_KEYS = ("name", "uuid", "pci_bus_id", "memory_total_bytes")


_HEX_KEYS = ("pci_device_id", "pci_subsystem_id")


def _format_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int) and key in _HEX_KEYS:
        return f"0x{value:08X}"
    text = str(value)
    if any(ord(char) < 32 for char in text):
        raise ConfigError(f"{key}={text!r}: control characters cannot be stored")
    return text


def render_config(host: SimHostGpus) -> str:
    """The file text for `host`; raises ConfigError if a value cannot be represented."""
    lines = ["# simulated GPUs for fleet/sim/libnvml.c (written by fleet.sim.config)", FORMAT_LINE]
    lines += [f"{key}={_format_value(key, getattr(host, key))}" for key in _HOST_KEYS]
    for gpu in host.gpus:
        lines.append("[gpu]")
        lines += [f"{key}={_format_value(key, getattr(gpu, key))}" for key in _GPU_KEYS]
        lines += [f"process={pid}:{used_bytes}" for pid, used_bytes in gpu.processes]
        lines += [
            f"error={_format_value('error', name)}:{code}" for name, code in gpu.errors.items()
        ]
    text = "\n".join(lines) + "\n"
    # Parsing back what we render applies every check the C library makes.
    parse_config(text, "<rendered config>")
    return text


def parse_config(text: str, source: str) -> SimHostGpus:
    """Parses the file text; errors are ConfigError naming `source` and the line."""
    host_values: dict[str, Any] = {}
    gpu_values: list[dict[str, Any]] = []
    line_number = 0
    seen_format = False
    for line_number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        if not seen_format:
            if line != FORMAT_LINE:
                raise ConfigError(f"expected {FORMAT_LINE!r} first", path=source, line=line_number)
            seen_format = True
            continue
        if line == "[gpu]":
            if len(gpu_values) >= MAX_GPUS:
                raise ConfigError(f"more than {MAX_GPUS} GPUs", path=source, line=line_number)
            gpu_values.append({"processes": [], "errors": {}, "_line": line_number})
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise ConfigError("expected key=value or [gpu]", path=source, line=line_number)
        try:
            if not gpu_values:
                host_values[key] = _parse_known(_HOST_KEYS, key, value)
            elif key in ("process", "error"):
                _add_list_item(gpu_values[-1], key, value)
            else:
                gpu_values[-1][key] = _parse_known(_GPU_KEYS, key, value)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}", path=source, line=line_number) from exc
    if not seen_format:
        raise ConfigError(f"empty file (expected {FORMAT_LINE!r})", path=source, line=line_number)
    gpus = []
    for values in gpu_values:
        section_line = values.pop("_line")
        missing = [key for key in _REQUIRED_GPU_KEYS if key not in values]
        if missing:
            message = f"[gpu] section lacks {', '.join(missing)}"
            raise ConfigError(message, path=source, line=section_line)
        gpus.append(SimGpu(**values))
    return SimHostGpus(gpus=gpus, **host_values)


def _parse_known(keys: dict[str, Callable[[str], Any]], key: str, value: str) -> Any:
    parse = keys.get(key)
    if parse is None:
        raise ValueError("unknown key")
    return parse(value)


def _add_list_item(gpu_values: dict[str, Any], key: str, value: str) -> None:
    left, colon, right = value.rpartition(":")
    if not colon:
        raise ValueError("expected two values separated by ':'")
    if key == "process":
        if len(gpu_values["processes"]) >= MAX_PROCESSES:
            raise ValueError(f"more than {MAX_PROCESSES} processes on one GPU")
        gpu_values["processes"].append((_parse_uint(_U32)(left), _parse_uint(_U64)(right)))
        return
    if len(gpu_values["errors"]) >= MAX_ERRORS:
        raise ValueError(f"more than {MAX_ERRORS} injected errors on one GPU")
    if not _FUNCTION_NAME.fullmatch(left) or len(left) > _TEXT_LIMIT:
        raise ValueError(f"{left!r} is not an NVML function name")
    code = _parse_uint(2**31 - 1)(right)
    if code == 0:
        raise ValueError("an injected error code must be nonzero")
    gpu_values["errors"][left] = code


def write_config(path: Path, host: SimHostGpus) -> None:
    """Writes `host` to `path` atomically (temp file + rename) so readers never see half a file.

    The new file's mtime is forced past the old one's, so the library notices a rewrite even
    within the kernel's timestamp granularity.
    """
    text = render_config(host)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        try:
            previous_ns = path.stat().st_mtime_ns
        except FileNotFoundError:
            previous_ns = 0
        mtime_ns = max(time.time_ns(), previous_ns + 1_000_000)
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_config(path: Path) -> SimHostGpus:
    """Reads a file written by write_config; errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read simulated GPU config: {exc.strerror}", path=str(path)
        ) from exc
    return parse_config(text, str(path))
