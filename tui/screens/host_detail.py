"""Host detail: facts, per-GPU history plots from the database, processes and recent events."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from fleet.errors import FleetError
from fleet.placement.free import not_free_reasons
from fleet.snapshot import FleetSnapshot, GpuSnapshot, HostSnapshot
from tui import format as fmt
from tui.messages import EventsLoaded, HistoryLoaded
from tui.rows import gpu_is_free
from tui.screens.base import FleetScreen, report_failure
from tui.screens.confirm import ConfirmScreen
from tui.service import GpuHistory, HistoryPoint
from tui.widgets.history_plot import HistoryPlot

WINDOWS_MIN = (5, 15, 60, 360, 1440)
METRICS = (("util", "util %"), ("mem", "mem"), ("temp", "temp"), ("power", "power"))
HISTORY_REFRESH_S = 5.0
RECENT_EVENTS = 8  # the host's newest events shown under its facts
PLOT_BINS = 100


TEMP_SCALE_C = 100.0  # temperature plots run from 0 to this (or the hottest sample, if hotter)


def binned(points: tuple[HistoryPoint, ...], since: float, until: float, bins: int,
           value: Callable[[HistoryPoint], float | None]) -> list[float | None]:
    """Values on a fixed time axis (newest at the right), a bin's highest; None: no sample.

    Bins between two samples hold the earlier value when the samples are no further apart
    than twice their usual spacing (the plot is finer than the history); a longer gap, and the
    time before the first sample, stay None.
    """
    span = max(until - since, 1e-9)
    out: list[float | None] = [None] * bins
    sampled: list[tuple[int, float, float]] = []  # (bin, ts, value) per sample, in time order
    for point in sorted(points, key=lambda p: p.ts):
        reading = value(point)
        if reading is not None and since <= point.ts <= until:
            index = min(bins - 1, int((point.ts - since) / span * bins))
            before = out[index]
            out[index] = reading if before is None else max(before, reading)
            sampled.append((index, point.ts, reading))
    gaps = sorted(b[1] - a[1] for a, b in itertools.pairwise(sampled))
    hold_s = 2 * gaps[len(gaps) // 2] if gaps else 0.0
    for (first, ts, reading), (following, next_ts, _) in itertools.pairwise(sampled):
        if next_ts - ts <= hold_s:
            for index in range(first + 1, following):
                out[index] = reading
    return out


def plot_maximum(values: list[float | None], known: float | None) -> float:
    """The top of a plot's scale: the known maximum (total memory, power limit), else the
    series' own highest value (never below it, so nothing is clipped)."""
    highest = max((v for v in values if v is not None), default=0.0)
    return max(known or 0.0, highest) or 1.0


class GpuPanel(Vertical):
    """One GPU: a header line with its current values and a one-line plot per metric."""

    def __init__(self, key: str) -> None:
        super().__init__(classes="gpu-panel", id=f"gpu-{key.rsplit(':', 1)[1]}")
        self.gpu_key = key
        self.gpu: GpuSnapshot | None = None
        self.not_free: tuple[str, ...] = ()  # why a default dispatch could not use it (empty: free)
        self.history: GpuHistory | None = None
        self.window = (0.0, 0.0)

    def compose(self) -> ComposeResult:
        yield Static(classes="gpu-head")
        for metric, label in METRICS:
            with Horizontal(classes="metric"):
                yield Static(label, classes="metric-label")
                yield HistoryPlot(classes=f"plot plot-{metric}")
                yield Static(classes=f"metric-now now-{metric}")

    def on_mount(self) -> None:
        self.call_after_refresh(self._render_all)

    def on_resize(self) -> None:
        """Plots are binned to their width: re-bin once layout settles the width (history may
        arrive before the first layout) and whenever the terminal changes size."""
        if self.history is not None:
            self.call_after_refresh(self._render_all)

    def show_gpu(self, gpu: GpuSnapshot, not_free: tuple[str, ...]) -> None:
        """Remember the live reading (and why it is not free) and show it once mounted."""
        self.gpu = gpu
        self.not_free = not_free
        self._render_all()

    def show_history(self, history: GpuHistory, since: float, until: float) -> None:
        """Remember the loaded samples and plot them once the panel's widgets exist."""
        self.history = history
        self.window = (since, until)
        self._render_all()

    def _render_all(self) -> None:
        if not self.query(".plot-util"):
            return
        if self.gpu is not None:
            self._render_gpu(self.gpu)
        if self.history is not None:
            self._render_history(self.history)

    def _render_gpu(self, gpu: GpuSnapshot) -> None:
        reading = gpu.reading
        holder = gpu.allocation
        owner = "" if holder is None else (
            f" · task {holder.task_id} {holder.task_name or ''}" if holder.kind == "task"
            else f" · reserved by {holder.owner}")
        head = fmt.gpu_state("lost" if reading.lost else gpu.state, gpu.drained)
        head.append(f"  GPU {gpu.index} · {reading.name or 'unknown model'}{owner}", style="bold")
        if self.not_free:
            head.append(f"  not free: {'; '.join(self.not_free)}", style=fmt.MUTED)
        else:
            head.append("  free", style=fmt.CALM)
        self.query_one(".gpu-head", Static).update(head)
        self.query_one(".now-util", Static).update(
            fmt.pct_bar(reading.utilization_gpu_pct, 6, fmt.UTIL_WARN, fmt.UTIL_HOT))
        self.query_one(".now-mem", Static).update(
            fmt.memory(reading.memory_used_bytes, reading.memory_total_bytes))
        self.query_one(".now-temp", Static).update(fmt.temperature(reading.temperature_c))
        self.query_one(".now-power", Static).update(fmt.watts(reading.power_draw_w))

    def _render_history(self, history: GpuHistory) -> None:
        since, until = self.window
        width = max(10, self.query_one(".plot-util", HistoryPlot).size.width or PLOT_BINS)
        points = history.points
        reading = self.gpu.reading if self.gpu is not None else None
        total = reading.memory_total_bytes if reading is not None else None
        limit = reading.power_limit_w if reading is not None else None
        util = binned(points, since, until, width, lambda p: p.util_pct)
        mem = binned(points, since, until, width, lambda p: p.memory_used_bytes)
        temp = binned(points, since, until, width, lambda p: p.temperature_c)
        power = binned(points, since, until, width, lambda p: p.power_w)
        self._plot("util", util, 100.0, fmt.UTIL_WARN, fmt.UTIL_HOT)
        self._plot("mem", mem, plot_maximum(mem, total), fmt.MEM_WARN, fmt.MEM_HOT)
        temp_top = plot_maximum(temp, TEMP_SCALE_C)
        self._plot("temp", temp, temp_top, fmt.TEMP_WARN / temp_top * 100,
                   fmt.TEMP_HOT / temp_top * 100)
        self._plot("power", power, plot_maximum(power, limit))

    def _plot(self, metric: str, values: list[float | None], maximum: float,
              warn: float | None = None, hot: float | None = None) -> None:
        self.query_one(f".plot-{metric}", HistoryPlot).plot(values, maximum, warn, hot)


class HostDetailScreen(FleetScreen):
    """Everything about one host."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("left_square_bracket", "window(-1)", "Shorter"),
        Binding("right_square_bracket", "window(1)", "Longer"),
        Binding("n", "toggle_drain", "Drain"),
        Binding("r", "reserve", "Reserve"),
    ]

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host_name = host
        self.window_index = 1
        self.history: dict[int, GpuHistory] = {}
        self.window = (0.0, 0.0)

    def compose(self) -> ComposeResult:
        yield Static(id="detail-title")
        with VerticalScroll(id="detail-body"):
            yield Static(id="facts")
            yield Vertical(id="gpu-panels")
            yield Static("Processes", classes="section")
            yield DataTable(id="processes", cursor_type="row")
            yield Static("Recent events, newest first", classes="section")
            yield Static(id="host-events")
        yield Footer()

    def on_mount(self) -> None:
        processes = self.query_one("#processes", DataTable)
        for key, label, width in (("gpu", "GPU", 4), ("pid", "PID", 8),
                                  ("mem", "GPU memory", 11), ("name", "Command", 30)):
            processes.add_column(label, width=width, key=key)
        self.load_history()
        self.load_events()
        self.set_interval(HISTORY_REFRESH_S, self.load_history)

    @property
    def window_minutes(self) -> int:
        """The history window shown in the plots."""
        return WINDOWS_MIN[self.window_index]

    def action_window(self, step: int) -> None:
        self.window_index = max(0, min(len(WINDOWS_MIN) - 1, self.window_index + step))
        self.load_history()
        snapshot = self.fleet_app.snapshot
        if snapshot is not None:
            self.show_snapshot(snapshot)

    @work(exclusive=True, group="history")
    async def load_history(self) -> None:
        until = self.now()
        try:
            history = await self.service.gpu_history(
                self.host_name, until - self.window_minutes * 60, until)
        except FleetError as exc:
            report_failure(self, f"history of {self.host_name}", exc)
            return
        self.post_message(HistoryLoaded(self.host_name, history,
                                        until - self.window_minutes * 60, until))

    @work(exclusive=True, group="events")
    async def load_events(self) -> None:
        try:
            # This host's own newest: newer events of other hosts never crowd them out.
            events = await self.service.events(RECENT_EVENTS, host=self.host_name)
        except FleetError as exc:
            report_failure(self, "events", exc)
            return
        self.post_message(EventsLoaded(events))

    @on(HistoryLoaded)
    def history_loaded(self, message: HistoryLoaded) -> None:
        self.history = {h.index: h for h in message.history}
        self.window = (message.since, message.until)
        for panel in self.query(GpuPanel):
            history = self.history.get(int(panel.gpu_key.rsplit(":", 1)[1]))
            if history is not None:
                panel.show_history(history, message.since, message.until)

    @on(EventsLoaded)
    def events_loaded(self, message: EventsLoaded) -> None:
        lines = [f"{fmt.age(self.now() - e.ts):>5}  {e.severity:<8} {e.message}"
                 for e in message.events]
        self.query_one("#host-events", Static).update(Text(
            "\n".join(lines) if lines else "no events recorded for this host"))

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        host = snapshot.host(self.host_name)
        title = self.query_one("#detail-title", Static)
        if host is None:
            title.update(Content.from_markup("[b]$name[/] — no longer in the fleet",
                                             name=self.host_name))
            return
        state = fmt.host_state(host.state, host.drained)
        state.append(f"  {host.spec.name}", style="bold")
        state.append(f"  ({host.spec.address}:{host.spec.port})  history: last "
                     f"{_window_label(self.window_minutes)}")
        title.update(state)
        self.query_one("#facts", Static).update(_facts(host, self.now()))
        self._sync_panels(host)
        self._sync_processes(host)

    def _sync_panels(self, host: HostSnapshot) -> None:
        container = self.query_one("#gpu-panels", Vertical)
        existing = {panel.gpu_key: panel for panel in container.query(GpuPanel)}
        for gpu in host.gpus:
            panel = existing.get(gpu.key)
            if panel is None:
                panel = GpuPanel(gpu.key)
                panel.gpu = gpu
                panel.not_free = tuple(not_free_reasons(host, gpu, self.now()))
                panel.history = self.history.get(gpu.index)
                panel.window = self.window
                container.mount(panel)
            else:
                panel.show_gpu(gpu, tuple(not_free_reasons(host, gpu, self.now())))
        if not host.gpus and not existing:
            container.mount(Static(host.reason or (host.report.gpu_reason if host.report
                                                   else None) or "this host has no GPUs",
                                   classes="muted", markup=False))  # the probe's words

    def _sync_processes(self, host: HostSnapshot) -> None:
        table = self.query_one("#processes", DataTable)
        rows = [(str(g.index), str(p.pid), fmt.gib(p.used_memory_bytes) + "G",
                 fmt.clip(p.name or "", 30))
                for g in host.gpus for p in g.reading.processes]
        current = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        if rows != current:
            table.clear()
            for row in rows:
                table.add_row(*(fmt.safe_cell(cell) for cell in row))  # names from the host

    def action_toggle_drain(self) -> None:
        snapshot = self.fleet_app.snapshot
        host = snapshot.host(self.host_name) if snapshot else None
        if host is None:
            return
        name, drained, service = host.spec.name, host.drained, self.service

        def decided(confirmed: bool | None) -> None:
            if confirmed and drained:
                self.perform(f"undrain {name}", lambda: service.undrain(name, None),
                             f"undrained {name}")
            elif confirmed:
                self.perform(f"drain {name}", lambda: service.drain(name, None, "drained from "
                             "the TUI"), f"drained {name}")

        self.app.push_screen(ConfirmScreen(f"{'Undrain' if drained else 'Drain'} {name}?"),
                             decided)

    def action_reserve(self) -> None:
        snapshot = self.fleet_app.snapshot
        host = snapshot.host(self.host_name) if snapshot else None
        free = [g.index for g in host.gpus if gpu_is_free(host, g, self.now())] if host else []
        if host is None or not free:
            self.notify(f"{self.host_name} has no free GPU to reserve",
                        severity="warning", markup=False)
            return
        name, service = host.spec.name, self.service

        def decided(confirmed: bool | None) -> None:
            if confirmed:
                self.perform(f"reserve {name}",
                             lambda: service.reserve(name, free, 3600.0, "reserved in the TUI"),
                             f"reserved {name} GPU {', '.join(map(str, free))} for 1h")

        self.app.push_screen(ConfirmScreen(
            f"Reserve {name} GPU {', '.join(map(str, free))} for 1 hour?"), decided)


def _window_label(minutes: int) -> str:
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h"


def _facts(host: HostSnapshot, now: float) -> Text:
    """Host facts as plain text (names and reasons come from outside: never markup)."""
    report = host.report
    facts = report.host if report else None
    labels = ", ".join(f"{k}={v}" for k, v in host.spec.labels) or "–"
    seen = fmt.age(now - host.last_seen if host.last_seen else None)
    text = Text(f"groups: {', '.join(host.spec.groups) or '–'}   labels: {labels}   "
                f"last seen: {seen}\n")
    if facts is not None:
        memory = f"{fmt.gib(facts.memory_available_bytes)}/{fmt.gib(facts.memory_total_bytes)}G"
        text.append(f"driver {facts.driver_version or '–'}  "
                    f"CUDA {facts.cuda_driver_version or '–'}  kernel {facts.kernel or '–'}  "
                    f"python {facts.python_version or '–'}\n")
        text.append(f"CPUs {facts.cpu_count or '–'}  load {fmt.load(facts.load_1m)} "
                    f"{fmt.load(facts.load_5m)} {fmt.load(facts.load_15m)}  RAM {memory} free\n")
    if host.reason:
        text.append(f"{host.state}: ", style="bold red")
        text.append(f"{host.reason}\n")
    if host.drained:
        text.append("drained: ", style="magenta")
        text.append(f"{host.drain_reason or 'no reason given'}\n")
    text.rstrip()
    return text
