"""Rendering of `fleet status` results as a table or as JSON-ready data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from fleet.render.table import Column, format_bytes, format_number, render_table
from fleet.textsafe import safe_text

if TYPE_CHECKING:
    from fleet.fanout import HostStatus
    from fleet.reports import GpuReport

GPU_COLUMNS = (
    Column("  GPU", ">"),
    Column("NAME", max_width=28),
    Column("UUID", max_width=40),
    Column("UTIL%", ">"),
    Column("MEM GiB", ">"),
    Column("TEMP", ">"),
    Column("POWER W", ">"),
    Column("PROCS (pid:MiB)", max_width=40),
)


def render_status(statuses: Sequence[HostStatus]) -> str:
    """One line per host (state, load, driver, why no GPUs), each followed by its GPU rows."""
    gpu_rows: list[list[object]] = []
    for status in statuses:
        for gpu in status.report.gpus if status.report else ():
            gpu_rows.append([gpu.index, *_gpu_cells(gpu)])
    table_lines = render_table(GPU_COLUMNS, gpu_rows).splitlines()
    lines = [table_lines[0]] if gpu_rows else []
    next_row = 1
    for status in statuses:
        lines.append(_host_line(status))
        count = len(status.report.gpus) if status.report else 0
        lines.extend(table_lines[next_row:next_row + count])
        next_row += count
    up = sum(1 for s in statuses if s.is_up)
    gpus = sum(len(s.report.gpus) for s in statuses if s.report is not None)
    lines.append(f"{up}/{len(statuses)} hosts up, {gpus} GPUs")
    return "\n".join(lines)


def _host_line(status: HostStatus) -> str:
    spec = status.spec
    where = "local" if spec.connection == "local" else f"{spec.address}:{spec.port}"
    parts = [safe_text(spec.name, limit=64), f"({safe_text(where, limit=64)})",
             status.state.upper()]
    if status.report is None:
        parts.append(safe_text(status.reason or "", limit=200))
        return " ".join(part for part in parts if part)
    host = status.report.host
    if host.load_1m is not None:
        parts.append(f"load {host.load_1m:.2f}")
    if host.memory_total_bytes is not None and host.memory_available_bytes is not None:
        used = host.memory_total_bytes - host.memory_available_bytes
        parts.append(f"mem {format_bytes(used)}/{format_bytes(host.memory_total_bytes)} GiB")
    if host.driver_version:
        parts.append(f"driver {safe_text(host.driver_version, limit=32)}")
    if status.report.gpu_reason:
        parts.append(f"no GPUs: {safe_text(status.report.gpu_reason, limit=200)}")
    return " ".join(parts)


def _gpu_cells(gpu: GpuReport) -> list[object]:
    if gpu.lost:
        return ["GPU LOST", gpu.uuid, None, None, None, None, gpu.error]
    memory = None
    if gpu.memory_total_bytes is not None:
        used = format_bytes(gpu.memory_used_bytes) or "?"
        memory = f"{used}/{format_bytes(gpu.memory_total_bytes)}"
    power = None
    if gpu.power_draw_w is not None:
        limit = format_number(gpu.power_limit_w)
        power = f"{gpu.power_draw_w:.0f}" + (f"/{limit}" if limit else "")
    processes = " ".join(
        f"{p.pid}:{'?' if p.used_memory_bytes is None else p.used_memory_bytes // 1024**2}"
        for p in gpu.processes
    )
    return [gpu.name, gpu.uuid, format_number(gpu.utilization_gpu_pct), memory,
            format_number(gpu.temperature_c, suffix="C"), power, processes or None]


def status_to_json(statuses: Sequence[HostStatus]) -> dict[str, Any]:
    """`fleet status --json` output: one object per host, reports as plain dicts."""
    return {
        "hosts": [
            {
                "name": s.spec.name,
                "address": s.spec.address,
                "port": s.spec.port,
                "connection": s.spec.connection,
                "state": s.state,
                "reason": s.reason,
                "elapsed_s": round(s.elapsed_s, 4),
                "probed_at": s.finished_at,
                "host": msgspec.to_builtins(s.report.host) if s.report else None,
                "gpu_reason": s.report.gpu_reason if s.report else None,
                "method": s.report.method if s.report else None,
                "gpus": [msgspec.to_builtins(g) for g in s.report.gpus] if s.report else [],
                "warnings": list(s.report.warnings) if s.report else [],
            }
            for s in statuses
        ]
    }
