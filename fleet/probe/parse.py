"""Turns one untrusted probe JSON line (or the dict it encodes) into a validated ProbeReport."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fleet.errors import ProbeError
from fleet.model import PROBE_SCHEMA_VERSION
from fleet.probe.bounds import capped_warnings, sanitize_text
from fleet.probe.limits import (
    KNOWN_METHODS,
    MAX_GPUS,
    MAX_INT,
    MAX_LINE_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_PROCESSES_PER_GPU,
    MAX_WARNINGS,
)
from fleet.probe.typed import typed_report
from fleet.reports import GpuReport, HostReport, ProbeReport, ProcessInfo

__all__ = [
    "KNOWN_METHODS",
    "MAX_GPUS",
    "MAX_INT",
    "MAX_LINE_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PROCESSES_PER_GPU",
    "MAX_WARNINGS",
    "parse_probe_line",
    "parse_probe_line_lenient",
    "report_from_dict",
    "sanitize_text",
]

T = TypeVar("T")


class _Fields:
    """Typed access to one JSON object's fields; bad values become None plus a warning."""

    def __init__(self, data: Mapping[str, Any], where: str, warnings: list[str]) -> None:
        self.data = data
        self.where = where
        self.warnings = warnings

    def _bad(self, key: str, expected: str, value: Any) -> None:
        self.warnings.append(
            f"{self.where}.{key}: expected {expected}, got {type(value).__name__}; ignored"
        )

    def _get(self, key: str, expected: str, convert: Callable[[Any], T | None]) -> T | None:
        value = self.data.get(key)
        if value is None:
            return None
        converted = convert(value)
        if converted is None:
            self._bad(key, expected, value)
        return converted

    def integer(self, key: str, minimum: int = 0) -> int | None:
        def convert(value: Any) -> int | None:
            if isinstance(value, bool):
                return None
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            if isinstance(value, int) and minimum <= value <= MAX_INT:
                return value
            return None

        return self._get(key, f"integer >= {minimum}", convert)

    def number(self, key: str) -> float | None:
        def convert(value: Any) -> float | None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            number = float(value)
            return number if math.isfinite(number) and abs(number) < 1e18 else None

        return self._get(key, "finite number", convert)

    def boolean(self, key: str) -> bool | None:
        return self._get(key, "boolean", lambda value: value if isinstance(value, bool) else None)

    def text(self, key: str, limit: int = MAX_NAME_CHARS) -> str | None:
        def convert(value: Any) -> str | None:
            return sanitize_text(value, limit) if isinstance(value, str) else None

        return self._get(key, "string", convert)


def _object(value: Any, where: str, host: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProbeError(host, f"probe output: {where} is {type(value).__name__}, not an object")
    return value


def _list(value: Any, where: str, host: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProbeError(host, f"probe output: {where} is {type(value).__name__}, not a list")
    if len(value) > limit:
        raise ProbeError(host, f"probe output: {where} has {len(value)} entries (limit {limit})")
    return value


def _host_report(data: Mapping[str, Any], warnings: list[str]) -> HostReport:
    read = _Fields(data, "host", warnings)
    return HostReport(
        hostname=read.text("hostname"),
        kernel=read.text("kernel"),
        driver_version=read.text("driver_version"),
        cuda_driver_version=read.text("cuda_driver_version"),
        nvml_version=read.text("nvml_version"),
        cpu_count=read.integer("cpu_count"),
        load_1m=read.number("load_1m"),
        load_5m=read.number("load_5m"),
        load_15m=read.number("load_15m"),
        cpu_busy_pct=read.number("cpu_busy_pct"),
        memory_total_bytes=read.integer("memory_total_bytes"),
        memory_available_bytes=read.integer("memory_available_bytes"),
        disk_root_total_bytes=read.integer("disk_root_total_bytes"),
        disk_root_free_bytes=read.integer("disk_root_free_bytes"),
        disk_tasks_total_bytes=read.integer("disk_tasks_total_bytes"),
        disk_tasks_free_bytes=read.integer("disk_tasks_free_bytes"),
        net_rx_bytes=read.integer("net_rx_bytes"),
        net_tx_bytes=read.integer("net_tx_bytes"),
        python_version=read.text("python_version"),
    )


def _processes(value: Any, where: str, host: str, warnings: list[str]) -> tuple[ProcessInfo, ...]:
    processes = []
    for position, item in enumerate(_list(value, where, host, MAX_PROCESSES_PER_GPU)):
        item_where = f"{where}[{position}]"
        if not isinstance(item, dict):
            warnings.append(f"{item_where}: expected object, got {type(item).__name__}; dropped")
            continue
        read = _Fields(item, item_where, warnings)
        pid = read.integer("pid", minimum=1)
        if pid is None:
            warnings.append(f"{item_where}: no valid pid; dropped")
            continue
        processes.append(
            ProcessInfo(
                pid=pid, used_memory_bytes=read.integer("used_memory_bytes"),
                name=read.text("name"), uid=read.integer("uid", minimum=0), user=read.text("user"),
                session=read.integer("session", minimum=0),
            )
        )
    return tuple(processes)


def _gpu_report(data: Mapping[str, Any], where: str, host: str, warnings: list[str]) -> GpuReport:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPUS:
        raise ProbeError(host, f"probe output: {where}.index is not a GPU index: {index!r:.40}")
    read = _Fields(data, f"gpus[{index}]", warnings)
    return GpuReport(
        index=index,
        uuid=read.text("uuid"),
        name=read.text("name"),
        pci_bus_id=read.text("pci_bus_id"),
        memory_total_bytes=read.integer("memory_total_bytes"),
        memory_used_bytes=read.integer("memory_used_bytes"),
        utilization_gpu_pct=read.number("utilization_gpu_pct"),
        utilization_memory_pct=read.number("utilization_memory_pct"),
        temperature_c=read.number("temperature_c"),
        power_draw_w=read.number("power_draw_w"),
        power_limit_w=read.number("power_limit_w"),
        fan_speed_pct=read.number("fan_speed_pct"),
        performance_state=read.integer("performance_state"),
        clock_sm_mhz=read.integer("clock_sm_mhz"),
        clock_mem_mhz=read.integer("clock_mem_mhz"),
        ecc_errors_corrected=read.integer("ecc_errors_corrected"),
        ecc_errors_uncorrected=read.integer("ecc_errors_uncorrected"),
        retired_pages_pending=read.boolean("retired_pages_pending"),
        processes=_processes(data.get("processes"), f"gpus[{index}].processes", host, warnings),
        lost=read.boolean("lost") is True,
        error=read.text("error", MAX_MESSAGE_CHARS),
    )


def report_from_dict(data: Any, host: str) -> ProbeReport:
    """Validate a decoded probe reading; raises ProbeError(host) for anything structurally wrong."""
    line = _object(data, "the line", host)
    schema = line.get("schema")
    if schema != PROBE_SCHEMA_VERSION or isinstance(schema, bool):
        raise ProbeError(
            host,
            f"probe output has schema {schema!r:.40}, this fleet reads schema "
            f"{PROBE_SCHEMA_VERSION} (controller and probe versions differ?)",
        )
    timestamp = line.get("ts")
    if (
        isinstance(timestamp, bool)
        or not isinstance(timestamp, int | float)
        or not math.isfinite(timestamp)
        or timestamp < 0
    ):
        raise ProbeError(host, f"probe output: ts is not a timestamp: {timestamp!r:.40}")
    warnings: list[str] = []
    read = _Fields(line, "line", warnings)
    method = read.text("method") or "nvml"
    if method not in KNOWN_METHODS:
        raise ProbeError(host, f"probe output: unknown method {method!r}")
    gpus: list[GpuReport] = []
    for position, item in enumerate(_list(line.get("gpus"), "gpus", host, MAX_GPUS)):
        gpus.append(
            _gpu_report(
                _object(item, f"gpus[{position}]", host), f"gpus[{position}]", host, warnings
            )
        )
    indexes = [gpu.index for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise ProbeError(host, f"probe output: duplicate GPU indexes {sorted(indexes)}")
    host_report = _host_report(_object(line.get("host", {}), "host", host), warnings)
    gpu_reason = read.text("gpu_reason", MAX_MESSAGE_CHARS)
    sent_warnings = [
        sanitize_text(item, MAX_MESSAGE_CHARS) if isinstance(item, str) else repr(item)[:100]
        for item in _list(line.get("warnings"), "warnings", host, 100_000)
    ]
    return ProbeReport(
        schema=PROBE_SCHEMA_VERSION,
        timestamp=float(timestamp),
        host=host_report,
        gpus=tuple(sorted(gpus, key=lambda gpu: gpu.index)),
        gpu_reason=gpu_reason,
        method=method,
        warnings=capped_warnings(sent_warnings + warnings),
    )


def parse_probe_line(line: bytes | str, host: str) -> ProbeReport:
    """Parse one JSON line printed by the probe; raises only ProbeError (naming `host`).

    A line that is exactly the probe's schema with every value in bounds is decoded and
    validated in one C pass (fleet.probe.typed); anything else takes the field-by-field path
    below, which gives the same report for such lines and the warnings and errors for others.
    """
    size = len(line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line)
    if size > MAX_LINE_BYTES:
        raise ProbeError(host, f"probe output line is {size} bytes (limit {MAX_LINE_BYTES})")
    report = typed_report(line)
    return report if report is not None else parse_probe_line_lenient(line, host)


def parse_probe_line_lenient(line: bytes | str, host: str) -> ProbeReport:
    """parse_probe_line without the typed fast path: bad fields become null plus a warning."""
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ProbeError(host, f"probe output is not UTF-8: {exc}") from exc
    except RecursionError as exc:
        raise ProbeError(host, "probe output is nested too deeply") from exc
    except ValueError as exc:
        preview = sanitize_text(text if isinstance(line, bytes) else line, 80)
        raise ProbeError(host, f"probe output is not JSON ({exc}): {preview!r}") from exc
    return report_from_dict(data, host)
