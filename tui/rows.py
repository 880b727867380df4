"""Fleet overview rows from a snapshot: per-host and per-GPU cells, filtering and sort orders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from fleet.snapshot import GpuSnapshot, HostSnapshot
from tui import format as fmt

# (key, label, width): fixed widths so update_cell never has to re-measure the table.
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("name", "Host / GPU", 17),
    ("state", "State", 8),
    ("gpus", "Free", 5),
    ("util", "Util", 13),
    ("mem", "Memory", 12),
    ("temp", "Temp", 4),
    ("power", "Power", 6),
    ("load", "Load", 5),
    ("alloc", "Allocated", 12),
    ("seen", "Seen", 5),
    ("strip", "GPUs", 8),
)
COLUMN_WIDTHS = {key: width for key, _, width in COLUMNS}
SORTS = ("name", "util", "memory", "temp", "free", "state")
Cells = tuple[Text | str, ...]


def gpu_is_free(host: HostSnapshot, gpu: GpuSnapshot) -> bool:
    """Placeable now: host up and not drained, GPU healthy, not drained, not allocated."""
    return (host.state == "up" and not host.drained and gpu.state == "ok" and not gpu.drained
            and gpu.allocation is None and not gpu.reading.lost)


def free_count(host: HostSnapshot) -> int:
    """How many of the host's GPUs are free."""
    return sum(1 for gpu in host.gpus if gpu_is_free(host, gpu))


def mean(values: list[float]) -> float | None:
    """The mean, or None for no values."""
    return sum(values) / len(values) if values else None


def host_util(host: HostSnapshot) -> float | None:
    """Average GPU utilisation of the host."""
    return mean([g.reading.utilization_gpu_pct for g in host.gpus
                 if g.reading.utilization_gpu_pct is not None])


def host_memory(host: HostSnapshot) -> tuple[float | None, float | None]:
    """(used, total) GPU memory summed over the host's GPUs that report it."""
    used = [g.reading.memory_used_bytes for g in host.gpus
            if g.reading.memory_used_bytes is not None]
    total = [g.reading.memory_total_bytes for g in host.gpus
             if g.reading.memory_total_bytes is not None]
    return (float(sum(used)) if used else None, float(sum(total)) if total else None)


def hottest(host: HostSnapshot) -> float | None:
    """The highest GPU temperature on the host."""
    temps = [g.reading.temperature_c for g in host.gpus if g.reading.temperature_c is not None]
    return max(temps) if temps else None


def host_power(host: HostSnapshot) -> float | None:
    """Total GPU power draw of the host."""
    draws = [g.reading.power_draw_w for g in host.gpus if g.reading.power_draw_w is not None]
    return sum(draws) if draws else None


def host_state_label(host: HostSnapshot) -> Text:
    """Host state, with HOT/FAILED surfaced from its GPUs when the host itself is up."""
    if host.state == "up" and not host.drained:
        bad = {g.state for g in host.gpus} - {"ok"}
        for state in ("failed", "lost", "hot", "degraded"):
            if state in bad:
                return fmt.gpu_state(state, False)
    return fmt.host_state(host.state, host.drained)


def host_cells(host: HostSnapshot, expanded: bool, now: float) -> Cells:
    """The overview cells of a host row."""
    used, total = host_memory(host)
    report = host.report
    tasks = sum(1 for g in host.gpus if g.allocation and g.allocation.kind == "task")
    reserved = sum(1 for g in host.gpus if g.allocation and g.allocation.kind == "reservation")
    alloc = " ".join(part for part in (f"{tasks} task" if tasks else "",
                                        f"{reserved} rsv" if reserved else "") if part)
    marker = "" if not host.gpus else ("▾ " if expanded else "▸ ")
    strip = fmt.levels([g.reading.utilization_gpu_pct for g in host.gpus[:8]])
    if len(host.gpus) > 8:
        strip = Text(strip.plain[:7] + "+")
    return (
        Text(fmt.clip(marker + host.spec.name, COLUMN_WIDTHS["name"]), style="bold"),
        host_state_label(host),
        f"{free_count(host)}/{len(host.gpus)}" if host.gpus else "0",
        fmt.pct_bar(host_util(host), 8, fmt.UTIL_WARN, fmt.UTIL_HOT),
        fmt.memory(used, total),
        fmt.temperature(hottest(host)),
        fmt.watts(host_power(host)),
        fmt.load(report.host.load_1m if report else None),
        alloc or "–",
        fmt.age(now - host.last_seen if host.last_seen is not None else None),
        strip if host.gpus else Text(fmt.clip(host.reason or "no GPUs", 8), style=fmt.MUTED),
    )


def allocation_label(gpu: GpuSnapshot) -> str:
    """Who holds the GPU, compactly: `task 12 train` or `rsv alice`."""
    holder = gpu.allocation
    if holder is None:
        return "–"
    if holder.kind == "task":
        return fmt.clip(f"task {holder.task_id} {holder.task_name or ''}".strip(),
                        COLUMN_WIDTHS["alloc"])
    return fmt.clip(f"rsv {holder.owner}", COLUMN_WIDTHS["alloc"])


def gpu_cells(host: HostSnapshot, gpu: GpuSnapshot) -> Cells:
    """The overview cells of a GPU row under its expanded host."""
    reading = gpu.reading
    model = (reading.name or "GPU").removeprefix("NVIDIA ").removeprefix("GeForce ")
    processes = len(reading.processes)
    return (
        Text(fmt.clip(f"  {gpu.index} {model}", COLUMN_WIDTHS["name"])),
        fmt.gpu_state("lost" if reading.lost else gpu.state, gpu.drained),
        "free" if gpu_is_free(host, gpu) else "",
        fmt.pct_bar(reading.utilization_gpu_pct, 8, fmt.UTIL_WARN, fmt.UTIL_HOT),
        fmt.memory(reading.memory_used_bytes, reading.memory_total_bytes),
        fmt.temperature(reading.temperature_c),
        fmt.watts(reading.power_draw_w),
        "",
        allocation_label(gpu),
        "",
        f"{processes} proc" if processes else "",
    )


@dataclass(frozen=True)
class RowFilter:
    """Which hosts to show: a text query (name, @group, key=value, state:X) and free-only."""

    query: str = ""
    free_only: bool = False

    def matches(self, host: HostSnapshot) -> bool:
        """Whether every query term matches the host (and it has a free GPU if asked)."""
        if self.free_only and free_count(host) == 0:
            return False
        return all(_term_matches(term, host) for term in self.query.lower().split())


def _term_matches(term: str, host: HostSnapshot) -> bool:
    if term.startswith("@"):
        return term[1:] in {g.lower() for g in host.spec.groups}
    if term.startswith("state:"):
        wanted = term.removeprefix("state:")
        states = {host.state, "drained" if host.drained else ""} | {g.state for g in host.gpus}
        return wanted in states
    if "=" in term:
        key, _, value = term.partition("=")
        label = host.spec.label(key)
        return label is not None and label.lower() == value
    return term in host.spec.name.lower()


_STATE_RANK = {"down": 0, "unreachable": 0, "auth_failed": 1, "host_key_rejected": 1,
               "probe_error": 2, "unknown": 3, "up": 4}


def sort_key(sort: str) -> Callable[[HostSnapshot], tuple[float | str, str]]:
    """The key function for a sort name; busiest/hottest/freest first, ties by name."""
    def by(value: Callable[[HostSnapshot], float | None]) -> Callable[
            [HostSnapshot], tuple[float | str, str]]:
        return lambda host: (-(value(host) or -1.0), host.spec.name)

    if sort == "util":
        return by(host_util)
    if sort == "memory":
        return by(lambda h: _fraction(*host_memory(h)))
    if sort == "temp":
        return by(hottest)
    if sort == "free":
        return by(lambda h: float(free_count(h)))
    if sort == "state":
        return lambda host: (float(_STATE_RANK.get(host.state, 2) + (0.5 if host.drained else 0)),
                             host.spec.name)
    return lambda host: (host.spec.name, "")


def _fraction(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None
