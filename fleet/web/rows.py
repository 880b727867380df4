"""A live snapshot as the overview's rows: one flat dict of display cells per host and per GPU.

The page shows these strings as they are (text, never markup) and the live stream sends the cells
that changed, so every value the overview shows is computed here, once, from fleet's own
definitions (free GPUs from fleet.placement.free, sample age from the placement default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleet.placement.free import describe_allocation, not_free_reasons
from fleet.placement.request import DEFAULT_MAX_SAMPLE_AGE_S
from fleet.render.table import format_bytes
from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot
from fleet.textsafe import safe_text

# A host sampled longer ago than placement accepts is stale: its values are dimmed and say so.
STALE_AFTER_S = DEFAULT_MAX_SAMPLE_AGE_S
Cells = dict[str, str]
# The sort keys the overview accepts (?sort=), each the name of a host cell.
SORT_KEYS = ("name", "state", "free", "util", "temp", "power", "load")
# Cells that exist only to sort by; pages never show them, so the live stream leaves them out.
SORT_ONLY_CELLS = frozenset({"free_n", "temp_n", "power_n"})


@dataclass(frozen=True)
class HostRows:
    """One host's row and its GPUs' rows, keyed "HOST:IDX", with what the filter matches.

    `name` is the host's own (keys, links); `label` is the name as shown (control characters
    made visible). `read`: `gpus` are those of a reading (before the monitor's first reading
    of the host there are none, which says nothing about its GPUs).
    """

    name: str
    label: str
    groups: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    cells: Cells
    gpus: dict[str, Cells]
    read: bool = True


def _number(value: float | None, digits: int = 0, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def freshness(host: HostSnapshot, now: float) -> tuple[str, str]:
    """(mark, words): "live" for a fresh reading, else why the values are old or missing."""
    if host.state != "up":
        why = host.state.replace("_", " ")
        detail = f": {safe_text(host.reason, limit=160)}" if host.reason else ""
        seen = "" if host.last_seen is None else f" (values from {_age(now - host.last_seen)} ago)"
        return "down", f"{why}{detail}{seen}"
    if host.last_seen is None:
        return "unknown", "not read yet"
    if now - host.last_seen > STALE_AFTER_S:
        return "stale", f"stale: last reading {_age(now - host.last_seen)} ago"
    return "live", "live"


def _age(seconds: float) -> str:
    # Coarse on purpose: the words change (and are sent) rarely, not every second.
    if seconds < 120:
        return f"{int(seconds // 10) * 10}s+"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"


# The cells of every GPU row, in gpu_cells' order.
GPU_CELLS = ("index", "name", "state", "tone", "free", "util", "util_pct", "mem", "mem_pct",
             "temp", "power", "holder", "fresh")


def blank_gpu() -> Cells:
    """A GPU row with no values yet (what pages fill from the live stream)."""
    return {key: "ok" if key == "tone" else "" for key in GPU_CELLS}


def gpu_cells(host: HostSnapshot, gpu: GpuSnapshot, now: float, mark: str) -> Cells:
    """One GPU's cells: state, whether it is free (or why not), readings, holder."""
    reading = gpu.reading
    reasons = not_free_reasons(host, gpu, now)
    used, total = reading.memory_used_bytes, reading.memory_total_bytes
    memory_pct = 100.0 * used / total if used is not None and total else None
    state = "lost" if reading.lost else gpu.state
    return {
        "index": str(gpu.index),
        "name": safe_text(reading.name or "?", limit=64),
        "state": state + (" (drained)" if gpu.drained else ""),
        "tone": state if mark == "live" else "dim",
        "free": "free" if not reasons else safe_text(reasons[0], limit=80),
        "util": _number(reading.utilization_gpu_pct, suffix=" %"),
        "util_pct": _number(reading.utilization_gpu_pct),
        "mem": f"{format_bytes(used) or '?'}/{format_bytes(total) or '?'} GiB",
        "mem_pct": _number(memory_pct),
        "temp": _number(reading.temperature_c, suffix=" °C"),
        "power": _number(reading.power_draw_w, suffix=" W"),
        "holder": "" if gpu.allocation is None else safe_text(
            describe_allocation(gpu.allocation), limit=80),
        "fresh": mark,
    }


def host_cells(host: HostSnapshot, gpus: Iterable[Cells], now: float, mark: str,
               words: str) -> Cells:
    """A host's summary cells over its GPUs' cells (free/total, mean util, memory, hottest)."""
    gpu_list = list(gpus)
    readings = [gpu.reading for gpu in host.gpus if not gpu.reading.lost]
    utils = [r.utilization_gpu_pct for r in readings if r.utilization_gpu_pct is not None]
    temps = [r.temperature_c for r in readings if r.temperature_c is not None]
    powers = [r.power_draw_w for r in readings if r.power_draw_w is not None]
    used = sum(r.memory_used_bytes or 0 for r in readings)
    total = sum(r.memory_total_bytes or 0 for r in readings)
    report = host.report.host if host.report is not None else None
    free = sum(1 for cells in gpu_list if cells["free"] == "free")
    holders = sorted({gpu.allocation.owner for gpu in host.gpus if gpu.allocation is not None})
    mean_util = sum(utils) / len(utils) if utils else None
    state = host.state.replace("_", " ") + (" (drained)" if host.drained else "")
    return {
        "state": state,
        "tone": "ok" if mark == "live" else "dim",
        "fresh": mark,
        "why": words,
        "free": f"{free}/{len(host.gpus)}",
        "free_n": str(free),
        "util": _number(mean_util, suffix=" %"),
        "util_pct": _number(mean_util),
        "mem": f"{format_bytes(used)}/{format_bytes(total)} GiB" if total else "–",
        "mem_pct": _number(100.0 * used / total if total else None),
        "temp": _number(max(temps) if temps else None, suffix=" °C"),
        "temp_n": _number(max(temps) if temps else None),
        "hot": "hot" if any(gpu.state == "hot" for gpu in host.gpus) else "",
        "power": _number(sum(powers) if powers else None, suffix=" W"),
        "power_n": _number(sum(powers) if powers else None),
        "load": _number(report.load_1m if report else None, 2),
        "alloc": ", ".join(safe_text(owner, limit=32) for owner in holders) or "–",
    }


def host_rows(host: HostSnapshot, now: float) -> HostRows:
    """The rows of one host at epoch time `now`."""
    mark, words = freshness(host, now)
    gpus = {gpu.key: gpu_cells(host, gpu, now, mark) for gpu in host.gpus}
    spec = host.spec
    return HostRows(spec.name, safe_text(spec.name, limit=96), spec.groups, spec.labels,
                    host_cells(host, gpus.values(), now, mark, words), gpus,
                    read=host.report is not None)


def fleet_rows(snapshot: FleetSnapshot, now: float) -> dict[str, HostRows]:
    """Every host's rows, by host name, in the snapshot's order."""
    return {host.spec.name: host_rows(host, now) for host in snapshot.hosts}


def sort_rows(rows: Iterable[HostRows], key: str) -> list[HostRows]:
    """Rows ordered by one of SORT_KEYS: names ascending, numbers and states busiest first."""
    def numeric(cell: str) -> float:
        try:
            return -float(cell)
        except ValueError:
            return float("inf")  # "–" (no reading) sorts last

    ordered = sorted(rows, key=lambda row: row.name)
    if key == "state":
        return sorted(ordered, key=lambda row: (row.cells["fresh"] == "live", row.cells["state"]))
    if key == "name":
        return ordered
    numeric_cells = {"free": "free_n", "util": "util_pct", "temp": "temp_n", "power": "power_n"}
    cell = numeric_cells.get(key, key)
    return sorted(ordered, key=lambda row: numeric(row.cells[cell]))
