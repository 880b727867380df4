"""Fleet overview rows from a snapshot: per-host and per-GPU cells, filtering and sort orders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from fleet.inventory import host_matches
from fleet.placement.free import free_gpus, is_free
from fleet.placement.request import DEFAULT_MAX_SAMPLE_AGE_S
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
# When the terminal is too narrow for every column, these go first, in this order (the README's
# TUI section lists it too): the GPU strip, last seen, load, power, allocation, memory. Host,
# state, free GPUs, utilisation and temperature always stay (they fit in 80 columns).
DROP_ORDER = ("strip", "seen", "load", "power", "alloc", "mem")
CELL_PADDING = 2  # DataTable pads each cell by one column on either side
SCROLLBAR = 2  # room for the vertical scrollbar
SORTS = ("name", "util", "memory", "temp", "free", "state")
Cells = tuple[Text | str, ...]


def visible_columns(width: int) -> tuple[str, ...]:
    """The keys of the columns that fit in `width` cells, dropping them in DROP_ORDER."""
    shown = [key for key, _, _ in COLUMNS]

    def needed() -> int:
        return sum(COLUMN_WIDTHS[key] + CELL_PADDING for key in shown) + SCROLLBAR

    for key in DROP_ORDER:
        if needed() <= width:
            break
        shown.remove(key)
    return tuple(shown)


def gpu_is_free(host: HostSnapshot, gpu: GpuSnapshot, now: float) -> bool:
    """Free as placement means it (fleet.placement.free): a default dispatch could use it."""
    return is_free(host, gpu, now)


def free_count(host: HostSnapshot, now: float) -> int:
    """How many of the host's GPUs are free."""
    return len(free_gpus(host, now))


FreeCount = Callable[[HostSnapshot, float], int]


class FreeCounts:
    """free_count per host, recomputed only when the host's snapshot changed or its report
    crossed the sample-age limit: the only way `now` enters "free" (fleet.placement.free, which
    dates every GPU of a snapshot by its host's report)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[HostSnapshot, bool, int]] = {}

    def __call__(self, host: HostSnapshot, now: float) -> int:
        expired = (host.report is not None
                   and now - host.report.timestamp > DEFAULT_MAX_SAMPLE_AGE_S)
        known = self._known.get(host.spec.name)
        # `==` too: an unchanged host may arrive as a new, equal object (a decoded snapshot).
        if known is not None and known[1] == expired and (known[0] is host or known[0] == host):
            return known[2]
        count = free_count(host, now)
        self._known[host.spec.name] = (host, expired, count)
        return count

    def keep_only(self, hosts: tuple[HostSnapshot, ...]) -> None:
        """Forget hosts that are no longer in the fleet."""
        if len(self._known) > len(hosts):
            names = {host.spec.name for host in hosts}
            self._known = {name: known for name, known in self._known.items() if name in names}


def is_stale(host: HostSnapshot) -> bool:
    """Whether the host's values are its last good report, kept while it is not up."""
    return host.state != "up" and host.report is not None


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
    unmanaged = sum(1 for g in host.gpus if g.unmanaged)
    alloc = " ".join(part for part in (f"{tasks} task" if tasks else "",
                                        f"{reserved} rsv" if reserved else "",
                                        f"⚠{unmanaged}" if unmanaged else "") if part)
    marker = "" if not host.gpus else ("▾ " if expanded else "▸ ")
    strip = fmt.levels([g.reading.utilization_gpu_pct for g in host.gpus[:8]])
    if len(host.gpus) > 8:
        strip = Text(strip.plain[:7] + "+")
    stale = is_stale(host)
    return (
        Text(fmt.clip(marker + host.spec.name, COLUMN_WIDTHS["name"]), style="bold"),
        host_state_label(host),
        f"{free_count(host, now)}/{len(host.gpus)}" if host.gpus else "0",
        _util(host_util(host), stale),
        _stale(fmt.memory(used, total), stale),
        _stale(fmt.temperature(hottest(host)), stale),
        _stale(fmt.watts(host_power(host)), stale),
        _stale(fmt.load(report.host.load_1m if report else None), stale),
        alloc or "–",
        fmt.age(now - host.last_seen if host.last_seen is not None else None),
        (_stale(strip, stale) if host.gpus
         else Text(fmt.clip(host.reason or "no GPUs", 8), style=fmt.MUTED)),
    )


def _util(pct: float | None, stale: bool) -> Text:
    """The utilisation bar, or for a host that is not up its last value marked stale."""
    if not stale:
        return fmt.pct_bar(pct, 8, fmt.UTIL_WARN, fmt.UTIL_HOT)
    value = fmt.MISSING.rjust(4) if pct is None else f"{pct:3.0f}%"
    return Text(f"{fmt.STALE_MARK:<8} {value}", style=fmt.STALE)


def _stale(cell: Text | str, stale: bool) -> Text | str:
    """A last-known value of a host that is not up: dim, without its level colours."""
    if not stale:
        return cell
    return Text(cell.plain if isinstance(cell, Text) else cell, style=fmt.STALE)


def allocation_label(gpu: GpuSnapshot) -> str:
    """Who holds the GPU, compactly: `task 12 train` or `rsv alice`; `⚠ bob` flags processes
    fleet did not start (fleet.health.unmanaged), with their users (clipped to the column)."""
    holder = gpu.allocation
    others = ",".join(dict.fromkeys(p.user or "?" for p in gpu.unmanaged))
    flag = f"⚠{others}" if others else ""
    if holder is None:
        return fmt.clip(flag, COLUMN_WIDTHS["alloc"]) if flag else "–"
    if holder.kind == "task":
        label = f"task {holder.task_id} {holder.task_name or ''}".strip()
    else:
        label = f"rsv {holder.owner}"
    return fmt.clip(f"{label} {flag}".strip(), COLUMN_WIDTHS["alloc"])


def gpu_cells(host: HostSnapshot, gpu: GpuSnapshot, now: float) -> Cells:
    """The overview cells of a GPU row under its expanded host."""
    reading = gpu.reading
    model = (reading.name or "GPU").removeprefix("NVIDIA ").removeprefix("GeForce ")
    processes = len(reading.processes)
    stale = is_stale(host)
    return (
        Text(fmt.clip(f"  {gpu.index} {model}", COLUMN_WIDTHS["name"])),
        fmt.gpu_state("lost" if reading.lost else gpu.state, gpu.drained),
        "free" if gpu_is_free(host, gpu, now) else "",
        _util(reading.utilization_gpu_pct, stale),
        _stale(fmt.memory(reading.memory_used_bytes, reading.memory_total_bytes), stale),
        _stale(fmt.temperature(reading.temperature_c), stale),
        _stale(fmt.watts(reading.power_draw_w), stale),
        "",
        allocation_label(gpu),
        "",
        f"{processes} proc" if processes else "",
    )


@dataclass(frozen=True)
class RowFilter:
    """Which hosts to show: a query and free-only.

    The query is space-separated words, all of which must match: `state:X` (host or GPU
    state, or `drained`); a `--hosts` pattern term as fleet.inventory.host_matches reads it
    (`gpu*`, `@group`, `label:key=value`, `!term`, comma lists); any other word also matches
    hosts whose name contains it (free-text search).
    """

    query: str = ""
    free_only: bool = False

    def matches(self, host: HostSnapshot, now: float, count: FreeCount = free_count) -> bool:
        """Whether every query word matches the host (and it has a free GPU if asked)."""
        if self.free_only and count(host, now) == 0:
            return False
        return all(_word_matches(word, host) for word in self.query.split())


def _word_matches(word: str, host: HostSnapshot) -> bool:
    spec = host.spec
    if word.lower().startswith("state:"):
        wanted = word[len("state:"):].lower()
        states = {host.state, "drained" if host.drained else ""} | {g.state for g in host.gpus}
        return wanted in states
    if host_matches(word, spec.name, spec.groups, spec.labels):
        return True
    plain = not word.startswith(("@", "!", "label:")) and not any(c in word for c in "*?[,")
    return plain and word.lower() in spec.name.lower()


_STATE_RANK = {"down": 0, "unreachable": 0, "auth_failed": 1, "host_key_rejected": 1,
               "probe_error": 2, "unknown": 3, "up": 4}


def sort_key(sort: str, now: float, count: FreeCount = free_count
             ) -> Callable[[HostSnapshot], tuple[float | str, str]]:
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
        return by(lambda h: float(count(h, now)))
    if sort == "state":
        return lambda host: (float(_STATE_RANK.get(host.state, 2) + (0.5 if host.drained else 0)),
                             host.spec.name)
    return lambda host: (host.spec.name, "")


def _fraction(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None
