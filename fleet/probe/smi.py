"""Fallback probe for hosts without python3: one shell command (nvidia-smi, /proc), its parser."""

from __future__ import annotations

import csv
import itertools
import re
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

import msgspec

from fleet.errors import ProbeError
from fleet.model import PROBE_SCHEMA_VERSION
from fleet.probe.parse import MAX_GPUS, MAX_LINE_BYTES, MAX_MESSAGE_CHARS, sanitize_text
from fleet.reports import GpuReport, HostReport, ProbeReport

QUERY_FIELDS = (
    "index", "uuid", "name", "pci.bus_id", "driver_version", "memory.total", "memory.used",
    "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
    "fan.speed", "pstate", "clocks.sm", "clocks.mem", "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
)  # fmt: skip
MIB = 1024 * 1024
_NOT_AVAILABLE = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}
_MARKER_SHAPE = re.compile(r"[0-9a-f]{16,64}")
_LOST_LINE = re.compile(r"Unable to determine the device handle for GPU ?([0-9A-Fa-f:.]*)")
_SECTIONS = ("smi", "smi-exit", "loadavg", "meminfo", "kernel", "hostname", "nproc", "end")

# nvidia-smi exits with the NVML error code that stopped it (and the shell's 127 if absent).
SMI_EXIT_REASONS = {
    9: "NVIDIA driver not loaded",
    12: "NVML library not found",
    15: "GPU is lost",
    127: "nvidia-smi is not installed",
}

T = TypeVar("T")


def new_marker() -> str:
    """A random section marker; GPU names cannot forge what they cannot predict."""
    return secrets.token_hex(16)


def smi_command(marker: str) -> str:
    """One POSIX shell command printing every section the fallback needs, each after a marker."""
    if not _MARKER_SHAPE.fullmatch(marker):
        raise ValueError(f"marker must be 16-64 lowercase hex digits, got {marker!r}")

    def head(section: str) -> str:
        return f"echo '@@{marker} {section}@@'"

    query = ",".join(QUERY_FIELDS)
    return "; ".join(
        [
            head("smi"),
            f"nvidia-smi --query-gpu={query} --format=csv,noheader,nounits 2>&1",
            "fleet_smi_exit=$?",
            head("smi-exit"),
            'echo "$fleet_smi_exit"',
            head("loadavg"),
            "cat /proc/loadavg 2>/dev/null",
            head("meminfo"),
            "cat /proc/meminfo 2>/dev/null",
            head("kernel"),
            "uname -r",
            head("hostname"),
            "hostname 2>/dev/null || uname -n",
            head("nproc"),
            "getconf _NPROCESSORS_ONLN 2>/dev/null",
            head("end"),
        ]
    )


def _split_sections(output: str, marker: str, host: str) -> dict[str, str]:
    pattern = re.compile(rf"^@@{re.escape(marker)} ([a-z-]+)@@$", re.MULTILINE)
    found = list(pattern.finditer(output))
    names = [match.group(1) for match in found]
    if names != list(_SECTIONS):
        raise ProbeError(
            host, f"nvidia-smi fallback output is incomplete or garbled (sections {names})"
        )
    sections = {}
    for match, following in itertools.pairwise(found):
        sections[match.group(1)] = output[match.end() : following.start()].strip("\n")
    return sections


def _value(raw: str, convert: Callable[[str], T], where: str, warnings: list[str]) -> T | None:
    text = raw.strip()
    if text.lower() in _NOT_AVAILABLE:
        return None
    try:
        return convert(text)
    except ValueError:
        warnings.append(f"{where}: unreadable value {sanitize_text(text, 40)!r}; ignored")
        return None


def _pstate(text: str) -> int:
    if not re.fullmatch(r"P\d{1,2}", text):
        raise ValueError(text)
    return int(text[1:])


def _mib(text: str) -> int:
    mebibytes = _float(text)
    if not 0 <= mebibytes < 2**40:
        raise ValueError(text)
    return int(mebibytes * MIB)


def _count(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise ValueError(text)
    return int(text)


def _float(text: str) -> float:
    """A finite number within the bounds the JSON probe line is held to (fleet.model)."""
    number = float(text)
    if not abs(number) < 1e18:  # also NaN and the infinities
        raise ValueError(text)
    return number


def _yes_no(text: str) -> bool:
    answer = text.lower()
    if answer not in ("yes", "no"):
        raise ValueError(text)
    return answer == "yes"


def _gpu_from_row(row: list[str], where: str, warnings: list[str]) -> GpuReport | None:
    extra = len(row) - len(QUERY_FIELDS)
    if extra > 0:
        # nvidia-smi does not quote: a name with commas spans cells; the name is the only
        # free-text field, so the surplus cells are its own.
        name_at = QUERY_FIELDS.index("name")
        joined = ", ".join(row[name_at : name_at + extra + 1])
        row = [*row[:name_at], joined, *row[name_at + extra + 1 :]]
    if len(row) != len(QUERY_FIELDS):
        warnings.append(f"{where}: {len(row)} fields, expected {len(QUERY_FIELDS)}; skipped")
        return None
    cells = dict(zip(QUERY_FIELDS, row, strict=True))
    index = _value(cells["index"], _count, f"{where} index", warnings)
    if index is None or not 0 <= index < MAX_GPUS:
        warnings.append(f"{where}: no valid GPU index; skipped")
        return None

    def read(field: str, convert: Callable[[str], T]) -> T | None:
        return _value(cells[field], convert, f"{where} {field}", warnings)

    return GpuReport(
        index=index,
        uuid=read("uuid", sanitize_text),
        name=read("name", sanitize_text),
        pci_bus_id=read("pci.bus_id", sanitize_text),
        memory_total_bytes=read("memory.total", _mib),
        memory_used_bytes=read("memory.used", _mib),
        utilization_gpu_pct=read("utilization.gpu", _float),
        utilization_memory_pct=read("utilization.memory", _float),
        temperature_c=read("temperature.gpu", _float),
        power_draw_w=read("power.draw", _float),
        power_limit_w=read("power.limit", _float),
        fan_speed_pct=read("fan.speed", _float),
        performance_state=read("pstate", _pstate),
        clock_sm_mhz=read("clocks.sm", _count),
        clock_mem_mhz=read("clocks.mem", _count),
        ecc_errors_corrected=read("ecc.errors.corrected.volatile.total", _count),
        ecc_errors_uncorrected=read("ecc.errors.uncorrected.volatile.total", _count),
        retired_pages_pending=read("retired_pages.pending", _yes_no),
    )


def parse_smi_csv(text: str, warnings: list[str]) -> tuple[list[GpuReport], str | None]:
    """GPUs from `nvidia-smi --query-gpu=QUERY_FIELDS --format=csv,noheader,nounits` output.

    Returns the GPUs and the driver version. A GPU nvidia-smi could not open (its "Unable to
    determine the device handle for GPU..." line) is reported lost; lines come in index order.
    """
    gpus: dict[int, GpuReport] = {}
    driver_versions: set[str] = set()
    next_index = 0
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"nvidia-smi line {line_number}"
        lost = _LOST_LINE.match(line)
        if lost:
            named = lost.group(1)
            index = int(named) if named.isdigit() else next_index
            gpus[index] = GpuReport(
                index=index, lost=True, error=sanitize_text(line.strip(), MAX_MESSAGE_CHARS)
            )
        else:
            row = next(csv.reader([line], skipinitialspace=True))
            gpu = _gpu_from_row(row, where, warnings)
            if gpu is None:
                continue
            if gpu.index in gpus:
                raise ValueError(f"nvidia-smi listed GPU {gpu.index} twice")
            index = gpu.index
            gpus[index] = gpu
            driver = _value(row[QUERY_FIELDS.index("driver_version")], sanitize_text, where, [])
            if driver:
                driver_versions.add(driver)
        next_index = index + 1
    if len(gpus) > MAX_GPUS:
        raise ValueError(f"nvidia-smi listed {len(gpus)} GPUs (limit {MAX_GPUS})")
    driver_version = driver_versions.pop() if len(driver_versions) == 1 else None
    return [gpus[index] for index in sorted(gpus)], driver_version


def _meminfo(text: str) -> tuple[int | None, int | None]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("MemTotal:", "MemAvailable:") and parts[1].isdigit():
            values[parts[0]] = int(parts[1]) * 1024
    return values.get("MemTotal:"), values.get("MemAvailable:")


def _host_report(sections: dict[str, str], warnings: list[str]) -> HostReport:
    loads: list[float | None] = [None, None, None]
    load_fields = sections["loadavg"].split()
    for position in range(min(3, len(load_fields))):
        loads[position] = _value(load_fields[position], _float, "/proc/loadavg", warnings)
    memory_total, memory_available = _meminfo(sections["meminfo"])
    nproc = sections["nproc"].strip()
    return HostReport(
        hostname=sanitize_text(sections["hostname"]) or None,
        kernel=sanitize_text(sections["kernel"]) or None,
        cpu_count=int(nproc) if nproc.isdigit() and len(nproc) <= 18 else None,
        load_1m=loads[0],
        load_5m=loads[1],
        load_15m=loads[2],
        memory_total_bytes=memory_total,
        memory_available_bytes=memory_available,
    )


def parse_smi_output(output: bytes | str, host: str, marker: str) -> ProbeReport:
    """The fallback command's whole output as a ProbeReport (method "nvidia-smi").

    nvidia-smi failing (no driver, no library, not installed) gives zero GPUs and a reason;
    output that is not what smi_command() prints raises ProbeError naming `host`.
    """
    if len(output) > MAX_LINE_BYTES:
        raise ProbeError(host, f"nvidia-smi fallback output is {len(output)} bytes, too large")
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    sections = _split_sections(text, marker, host)
    warnings: list[str] = []
    exit_text = sections["smi-exit"].strip()
    if not exit_text.isdigit():
        raise ProbeError(host, f"nvidia-smi fallback: unreadable exit status {exit_text[:20]!r}")
    smi_exit = int(exit_text)
    gpus: list[GpuReport] = []
    driver_version = None
    gpu_reason = None
    smi_text = sections["smi"]
    if smi_exit in (0, 15):  # 15: a GPU is lost, the others are still listed
        try:
            gpus, driver_version = parse_smi_csv(smi_text, warnings)
        except ValueError as exc:
            raise ProbeError(host, f"nvidia-smi fallback: {exc}") from exc
    if smi_exit != 0 and not gpus:
        first_line = sanitize_text(smi_text.strip().split("\n", 1)[0], MAX_MESSAGE_CHARS)
        known = SMI_EXIT_REASONS.get(smi_exit, "nvidia-smi failed")
        gpu_reason = f"{known} (nvidia-smi exit {smi_exit})" + (
            f": {first_line}" if first_line else ""
        )
    return ProbeReport(
        schema=PROBE_SCHEMA_VERSION,
        timestamp=time.time(),
        host=msgspec.structs.replace(_host_report(sections, warnings),
                                     driver_version=driver_version),
        gpus=tuple(gpus),
        gpu_reason=gpu_reason,
        method="nvidia-smi",
        warnings=tuple(warnings),
    )
