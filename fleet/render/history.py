"""`fleet history gpus|hosts` tables and CSV; memory is GiB with one decimal in both tables."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fleet.render.table import Column, format_bytes, format_number, render_table
from fleet.timeparse import format_time

if TYPE_CHECKING:
    from db.rows import HostHistoryPoint
    from db.types import GpuHistoryPoint

NO_SAMPLES = "no samples in that time range"

GPU_HISTORY_COLUMNS = (
    Column("TIME"), Column("HOST", max_width=32), Column("GPU", ">"), Column("UUID", max_width=40),
    Column("N", ">"), Column("UTIL%", ">"), Column("UTIL%_MAX", ">"),
    Column("MEM_USED_GIB", ">"), Column("MEM_USED_MAX_GIB", ">"), Column("TEMP_C", ">"),
    Column("TEMP_C_MAX", ">"), Column("POWER_W", ">"), Column("POWER_W_MAX", ">"),
)

HOST_HISTORY_COLUMNS = (
    Column("TIME"), Column("HOST", max_width=32), Column("N", ">"), Column("LOAD1", ">"),
    Column("LOAD1_MAX", ">"), Column("CPU%", ">"), Column("CPU%_MAX", ">"),
    Column("MEM_AVAIL_MIN_GIB", ">"), Column("RX_MB/S", ">"), Column("TX_MB/S", ">"),
)


def render_gpu_history(points: Sequence[GpuHistoryPoint]) -> str:
    """GPU samples or buckets as a table: averages then maxima, memory in GiB."""
    if not points:
        return NO_SAMPLES
    return render_table(GPU_HISTORY_COLUMNS, [
        [format_time(p.ts_ms / 1000), p.host, p.gpu_idx, p.uuid, p.samples,
         format_number(p.util_avg, 1), format_number(p.util_max, 1),
         format_bytes(_whole(p.mem_used_avg)), format_bytes(p.mem_used_max),
         format_number(p.temp_avg, 1), format_number(p.temp_max, 1),
         format_number(p.power_avg, 1), format_number(p.power_max, 1)]
        for p in points
    ])


def render_host_history(points: Sequence[HostHistoryPoint]) -> str:
    """Host samples or buckets as a table: load, CPU busy, memory available in GiB, network."""
    if not points:
        return NO_SAMPLES
    return render_table(HOST_HISTORY_COLUMNS, [
        [format_time(p.ts_ms / 1000), p.host, p.samples, format_number(p.load_1m_avg, 2),
         format_number(p.load_1m_max, 2), format_number(p.cpu_busy_avg, 1),
         format_number(p.cpu_busy_max, 1), format_bytes(p.memory_available_min),
         format_number(None if p.net_rx_bps is None else p.net_rx_bps / 1e6, 2),
         format_number(None if p.net_tx_bps is None else p.net_tx_bps / 1e6, 2)]
        for p in points
    ])


def rows_to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Dicts as CSV with a header from the first row's keys (empty text for no rows)."""
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)
